package tools

import (
	"encoding/json"
	"testing"
)

// flatTestSchema uses every keyword a flat schema models.
const flatTestSchema = `{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type": "object",
	"title": "t", "description": "every flat keyword",
	"properties": {
		"name": {"type": "string", "minLength": 2, "maxLength": 5, "description": "a name"},
		"count": {"type": "integer", "minimum": -3, "exclusiveMaximum": 10},
		"ratio": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 100},
		"mode": {"enum": ["fast", "slow"]},
		"on": {"type": "boolean", "default": false},
		"free": {},
		"also": true
	},
	"required": ["name", "count"],
	"additionalProperties": false
}`

func TestCompileFlat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		schema string
		flat   bool
	}{
		{"every flat keyword", flatTestSchema, true},
		{"the default schema", `{"type":"object"}`, true},
		{"inferred by Typed", `{"type":"object","properties":{"text":{"type":"string","description":"d"}},"required":["text"],"additionalProperties":false}`, true},
		{"draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, true},
		{"draft-04", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`, false},
		{"nested object", `{"type":"object","properties":{"o":{"type":"object"}}}`, false},
		{"array", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`, false},
		{"fractional bound", `{"type":"object","properties":{"n":{"type":"number","minimum":0.5}}}`, false},
		{"multipleOf", `{"type":"object","properties":{"n":{"type":"number","multipleOf":2}}}`, false},
		{"pattern", `{"type":"object","properties":{"s":{"type":"string","pattern":"^a"}}}`, false},
		{"format", `{"type":"object","properties":{"s":{"type":"string","format":"email"}}}`, false},
		{"length without type", `{"type":"object","properties":{"s":{"minLength":1}}}`, false},
		{"mixed enum", `{"type":"object","properties":{"e":{"enum":["a",1]}}}`, false},
		{"required but not declared", `{"type":"object","required":["x"]}`, false},
		{"additionalProperties schema", `{"type":"object","additionalProperties":{"type":"string"}}`, false},
		{"$ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"$defs":{"a":{"type":"string"}}}`, false},
		{"false property", `{"type":"object","properties":{"a":false}}`, false},
		{"not an object", `{"type":"string"}`, false},
		{"not JSON", `{"type":`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := compileFlat(json.RawMessage(tt.schema)) != nil; got != tt.flat {
				t.Errorf("compileFlat(%s) flat = %v; want %v", tt.schema, got, tt.flat)
			}
		})
	}
}

// TestFlatSchemaValid checks which texts the fast check accepts itself;
// whatever it leaves to the full validator must be so because it is
// invalid or beyond the fast check (escapes, fractions, duplicates).
func TestFlatSchemaValid(t *testing.T) {
	t.Parallel()
	f := compileFlat(json.RawMessage(flatTestSchema))
	if f == nil {
		t.Fatal("flatTestSchema is not flat")
	}
	for _, tt := range []struct {
		text string
		fast bool
	}{
		{`{"name":"ab","count":0}`, true},
		{`{ "name" : "abcde" , "count" : -3 , "ratio" : null, "mode": "slow", "on": true, "free": {"x": [1, "y", null, {}]}, "also": [] }`, true},
		{"{\n\t\"count\": 9,\r\n\"name\": \"ab\"}", true},
		{`{"name":"ab","count":0,"ratio":100}`, true},
		{`{"name":"a","count":0}`, false},            // too short
		{`{"name":"abcdef","count":0}`, false},       // too long
		{`{"name":"ab","count":10}`, false},          // exclusive maximum
		{`{"name":"ab","count":-4}`, false},          // minimum
		{`{"name":"ab","count":1.0}`, false},         // a fraction: left to the full validator
		{`{"name":"ab","count":1e1}`, false},         // an exponent: likewise
		{`{"name":"ab","count":"1"}`, false},         // a string for an integer
		{`{"name":"ab","count":0,"ratio":0}`, false}, // exclusive minimum
		{`{"name":"ab","count":0,"mode":"medium"}`, false},
		{`{"name":"ab","count":0,"on":null}`, false},
		{`{"name":"ab","count":0,"x":1}`, false},            // additional property
		{`{"name":"ab"}`, false},                            // missing required
		{`{"name":"ab","count":0,"count":1}`, false},        // duplicate
		{`{"name":"a\u0062","count":0}`, false},             // escapes where length matters
		{`{"name":"ab","count":0,"free":"\u00e9\n"}`, true}, // escapes where nothing matters
		{`{"name":"ab","count":0} `, false},                 // not trimmed
		{`{"name":"ab","count":0}x`, false},
		{`{"name":"ab","count":0,}`, false},
		{`{"name":"ab","count":01}`, false},
		{`{"name":"ab","count":-}`, false},
		{`{"name":"ab","count":0,"free":tru}`, false},
		{`{"name":"ab","count":0,"free":[1,]}`, false},
		{"{\"name\":\"a\x01\",\"count\":0}", false}, // control character
		{`{"name":"ab","count":1000000000000000}`, false},
		{`[]`, false},
		{``, false},
	} {
		if got := f.valid(tt.text); got != tt.fast {
			t.Errorf("valid(%s) = %v; want %v", tt.text, got, tt.fast)
		}
	}
}

// FuzzFlatSchema holds the fast check to what it promises: whatever it
// accepts, the full validator accepts too, for input and output alike.
func FuzzFlatSchema(f *testing.F) {
	schemas := []string{
		flatTestSchema,
		`{"type":"object"}`,
		`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`,
		`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":86400000}},"required":["ms"]}`,
		`{"type":"object","properties":{"n":{"type":"number","exclusiveMaximum":0},"b":{"type":["boolean","string"],"maxLength":0}}}`,
	}
	texts := []string{
		`{"name":"ab","count":0}`, `{"text":"hello"}`, `{"ms":20}`, `{"n":-1,"b":""}`, `{}`,
		`{"name":"abc","count":3,"free":{"a":[1,{"b":null}]},"also":"x","mode":"fast"}`,
		`{"text":"\u00e9"}`, `{"n":-0,"b":true}`, `{"ms":-1}`, `{"text":1}`,
	}
	for _, s := range schemas {
		for _, x := range texts {
			f.Add(s, x)
		}
	}
	f.Fuzz(func(t *testing.T, schema, text string) {
		r, err := NewRegistry(Tool{Name: "t", InputSchema: json.RawMessage(schema), OutputSchema: json.RawMessage(schema), Handler: nop})
		if err != nil {
			return
		}
		tool, _ := r.Snapshot().Lookup("t")
		full := *tool
		full.inputFlat, full.outputFlat = nil, nil
		if tool.inputFlat != nil && tool.inputFlat.valid(text) {
			got, err := full.ValidateArguments(text)
			if err != nil || string(got) != text {
				t.Errorf("schema %s: the fast check accepts arguments %q, the full validator says %q, %v", schema, text, got, err)
			}
		}
		if tool.outputFlat != nil && tool.outputFlat.valid(text) {
			if err := full.ValidateOutput(json.RawMessage(text)); err != nil {
				t.Errorf("schema %s: the fast check accepts output %q, the full validator says %v", schema, text, err)
			}
		}
		// Whatever the path, the answer is the full validator's.
		got, err := tool.ValidateArguments(text)
		want, wantErr := full.ValidateArguments(text)
		if string(got) != string(want) || (err == nil) != (wantErr == nil) {
			t.Errorf("schema %s, arguments %q: ValidateArguments = %q, %v; the full validator's = %q, %v", schema, text, got, err, want, wantErr)
		}
	})
}

// BenchmarkValidateArguments compares the fast check with the full
// validator on echo's arguments.
//
//	go test ./tools -run '^$' -bench ValidateArguments -benchmem
func BenchmarkValidateArguments(b *testing.B) {
	r, err := NewRegistry(Tool{Name: "echo", Handler: nop,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`)})
	if err != nil {
		b.Fatal(err)
	}
	tool, _ := r.Snapshot().Lookup("echo")
	full := *tool
	full.inputFlat = nil
	for name, t := range map[string]*Tool{"fast": tool, "full": &full} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := t.ValidateArguments(`{"text":"hello"}`); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
