package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const testSchema = `{
	"type": "object",
	"properties": {
		"path": {"type": "string", "minLength": 1},
		"limit": {"type": "integer", "minimum": 1},
		"mode": {"enum": ["a", "b"]},
		"tags": {"type": "array", "items": {"type": "string"}},
		"ratio": {"multipleOf": 0.1, "maximum": 9007199254740993}
	},
	"required": ["path"],
	"additionalProperties": false
}`

func testTool(t testing.TB) *Tool {
	t.Helper()
	r, err := NewRegistry(Tool{Name: "t", InputSchema: json.RawMessage(testSchema), Handler: nop,
		OutputSchema: json.RawMessage(`{"type":"object","required":["ok"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Snapshot().Lookup("t")
	return tool
}

func TestValidateArguments(t *testing.T) {
	t.Parallel()
	tool := testTool(t)
	tests := []struct {
		name string
		args string
		want string   // the arguments returned when valid
		errs []string // substrings of the error when not
	}{
		{"valid", `{"path": "a.txt", "limit": 3}`, `{"path": "a.txt", "limit": 3}`, nil},
		{"big integers keep their digits", `{"path":"a","limit":12345678901234567890}`, `{"path":"a","limit":12345678901234567890}`, nil},
		{"surrounding space", " \n{\"path\":\"a\"}\n", `{"path":"a"}`, nil},
		{"empty means {}", ``, "", []string{"/: missing property 'path'"}},
		{"not JSON", `{"path":`, "", []string{"not valid JSON"}},
		{"trailing garbage", `{"path":"a"} x`, "", []string{"not valid JSON"}},
		{"two objects", `{"path":"a"}{"path":"b"}`, "", []string{"not valid JSON"}},
		{"array", `[]`, "", []string{"must be a JSON object, got an array"}},
		{"string", `"hi"`, "", []string{"got a string"}},
		{"number", `1`, "", []string{"got a number"}},
		{"null", `null`, "", []string{"got null"}},
		{"every violation", `{"path":"","limit":0,"mode":"c","tags":[1],"x":true}`, "", []string{
			"/path: minLength", "/limit: minimum", "/mode: value must be one of", "/tags/0: got number, want string", "additional properties 'x'",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tool.ValidateArguments(tt.args)
			if tt.errs == nil {
				if err != nil || string(got) != tt.want {
					t.Fatalf("ValidateArguments(%q) = %s, %v; want %s", tt.args, got, err, tt.want)
				}
				return
			}
			var ae *ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("ValidateArguments(%q) error = %v, want an *ArgumentError", tt.args, err)
			}
			for _, want := range tt.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestValidateOutput(t *testing.T) {
	t.Parallel()
	tool := testTool(t)
	if err := tool.ValidateOutput(json.RawMessage(`{"ok":true}`)); err != nil {
		t.Errorf("valid output rejected: %v", err)
	}
	if err := tool.ValidateOutput(json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "missing property 'ok'") {
		t.Errorf("invalid output: %v, want missing property", err)
	}
	if err := tool.ValidateOutput(json.RawMessage(`{`)); err == nil {
		t.Error("non-JSON output accepted")
	}
}

// TestValidateOutputWithoutSchemaBuildsNoTree: structured content of a
// tool with no output schema is only checked to be JSON, which allocates
// nothing per element.
// Not parallel: AllocsPerRun counts the whole process's allocations.
func TestValidateOutputWithoutSchemaBuildsNoTree(t *testing.T) {
	wide := json.RawMessage(`{"a":[0` + strings.Repeat(",0", 100_000) + `]}`)
	var tool Tool
	if allocs := testing.AllocsPerRun(3, func() {
		if err := tool.ValidateOutput(wide); err != nil {
			t.Fatal(err)
		}
	}); allocs > 10 {
		t.Errorf("%v allocations to check 100,000 numbers with no schema; want a handful", allocs)
	}
	if err := tool.ValidateOutput(json.RawMessage(`{`)); err == nil {
		t.Error("non-JSON output accepted")
	}
}

func TestValidateArgumentsNeedsARegisteredTool(t *testing.T) {
	t.Parallel()
	if _, err := (&Tool{Name: "x"}).ValidateArguments(`{}`); !errors.Is(err, ErrNoSchema) {
		t.Errorf("err = %v, want ErrNoSchema", err)
	}
}

func FuzzValidateArguments(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"path":"a"}`, `{"path":"a","limit":1,"tags":["x"]}`, `[1]`, `null`, `"s"`,
		`{"path":`, `{"path":"a"} {}`, "{\"path\":\"\xff\"}", `{"limit":1e400,"path":"a"}`, `{"path":{"path":{"path":[]}}}`,
		`{"path":"a","ratio":0.3}`, `{"path":"a","ratio":9007199254740994}`, `{"path":"a","ratio":-0}`, `{"path":"a","limit":2.0}`, `{"path":"a","ratio":1e9999999}`, `{"path":"a","limit":2.00000000000000001}`} {
		f.Add(seed)
	}
	tool := testTool(f)
	f.Fuzz(func(t *testing.T, args string) {
		got, err := tool.ValidateArguments(args)
		if err != nil {
			var ae *ArgumentError
			if !errors.As(err, &ae) || ae.Error() == "" {
				t.Fatalf("error %v is not a descriptive *ArgumentError", err)
			}
			return
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(got))
		dec.UseNumber() // numbers such as 1e400 are valid JSON but overflow float64
		if dec.Decode(&obj) != nil {
			t.Fatalf("accepted arguments %q come back as %q, which is not a JSON object", args, got)
		}
		if _, ok := obj["path"].(string); !ok {
			t.Fatalf("accepted arguments %q lack the required string path", args)
		}
		if again, err := tool.ValidateArguments(string(got)); err != nil || string(again) != string(got) {
			t.Fatalf("validating the accepted form again: %s, %v", again, err)
		}
	})
}

// FuzzDecodeJSONAgreesWithExactDecoding checks the fast decoding path: the
// schema accepts a document decoded by decodeJSON exactly when it accepts
// the one jsonschema decodes keeping numbers as written.
func FuzzDecodeJSONAgreesWithExactDecoding(f *testing.F) {
	for _, seed := range []string{`{"path":"a","ratio":0.3}`, `{"path":"a","ratio":0.30000000000000004}`, `{"path":"a","limit":9007199254740993}`,
		`{"path":"a","ratio":9007199254740994}`, `{"path":"a","limit":1e2}`, `{"path":"a","tags":[1.5]}`, `{"path":"a","limit":-9007199254740991}`} {
		f.Add(seed)
	}
	tool := testTool(f)
	f.Fuzz(func(t *testing.T, text string) {
		exact, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return
		}
		fast, err := decodeJSON(text, "arguments")
		var ae *ArgumentError
		if errors.As(err, &ae) && strings.Contains(ae.Reason, "a number here has at most") {
			return // a number past MaxNumberDigits, refused on either path
		}
		if err != nil {
			t.Fatalf("decodeJSON(%q) failed where exact decoding did not: %v", text, err)
		}
		if (tool.input.Validate(fast) == nil) != (tool.input.Validate(exact) == nil) {
			t.Fatalf("%q: schema verdicts differ between fast and exact decoding", text)
		}
	})
}

// The fast decoding path must not change what the schema accepts: fractions
// and integers beyond 2^53 are compared exactly.
func TestValidateArgumentsComparesNumbersExactly(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(Tool{Name: "n", Handler: nop, InputSchema: json.RawMessage(`{"type":"object","properties":{
		"price": {"multipleOf": 0.01},
		"id": {"type": "integer", "maximum": 9007199254740992}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Snapshot().Lookup("n")
	tests := []struct {
		args string
		ok   bool
	}{
		{`{"price": 0.07}`, true}, // 0.07 is not a float64 multiple of 0.01
		{`{"price": 0.075}`, false},
		{`{"id": 9007199254740992}`, true},
		{`{"id": 9007199254740993}`, false}, // rounds to the maximum as a float64
		{`{"id": 1e400}`, false},
		{`{"id": 12}`, true},
	}
	for _, tt := range tests {
		if _, err := tool.ValidateArguments(tt.args); (err == nil) != tt.ok {
			t.Errorf("ValidateArguments(%s) = %v, want ok=%v", tt.args, err, tt.ok)
		}
	}
}

// A tool's schema comes from whoever declares the tool (an MCP server, an
// OpenAPI document): a $ref or $schema naming anything outside the schema
// is refused, never loaded. The compiler's default loader read file: URLs,
// so a schema could show a local file's text to the model through "const"
// (or block on a FIFO).
func TestSchemasLoadNothingFromOutside(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"const":"SECRET-VALUE"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fileURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(secret)}).String()
	for _, schema := range []string{
		`{"type":"object","properties":{"a":{"$ref":"` + fileURL + `"}}}`,
		`{"type":"object","$defs":{"x":{"$ref":"` + fileURL + `#"}},"properties":{"a":{"$ref":"#/$defs/x"}}}`,
		`{"$id":"` + strings.TrimSuffix(fileURL, "secret.json") + `schema.json","type":"object","properties":{"a":{"$ref":"secret.json"}}}`,
		`{"$schema":"` + fileURL + `","type":"object"}`,
		`{"type":"object","properties":{"a":{"$ref":"http://127.0.0.1:9/s.json"}}}`,
	} {
		for _, field := range []string{"input", "output"} {
			tool := Tool{Name: "t", Handler: nop, InputSchema: json.RawMessage(schema)}
			if field == "output" {
				tool.InputSchema, tool.OutputSchema = nil, json.RawMessage(schema)
			}
			_, err := NewRegistry(tool)
			if err == nil {
				t.Errorf("%s schema %s: compiled, want it refused", field, schema)
				continue
			}
			if strings.Contains(err.Error(), "SECRET-VALUE") || !strings.Contains(err.Error(), "self-contained") {
				t.Errorf("%s schema %s: err = %v, want one saying schemas are self-contained", field, schema, err)
			}
		}
	}
	// What stays: a local $ref, and the drafts' own metaschemas.
	if _, err := NewRegistry(Tool{Name: "t", Handler: nop, InputSchema: json.RawMessage(
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`)}); err != nil {
		t.Errorf("a local $ref: %v", err)
	}
	if _, err := NewRegistry(Tool{Name: "t", Handler: nop, InputSchema: json.RawMessage(
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/definitions/s"}}}`)}); err != nil {
		t.Errorf("draft-07 with a local $ref: %v", err)
	}
}

// The compiler's cost grows with the square of a schema's subschemas, so
// one tool's schema from an upstream could hold a core for as long as it
// liked: past MaxSubschemas a schema is refused, however it hides them.
func TestSchemaSubschemasBounded(t *testing.T) {
	t.Parallel()
	props := func(n int, sub string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":%s`, i, sub)
		}
		return b.String()
	}
	over := props(MaxSubschemas, `{"type":"string"}`) // with the root, one past
	for name, schema := range map[string]string{
		"properties":              `{"type":"object","properties":{` + over + `}}`,
		"booleans":                `{"type":"object","properties":{` + props(MaxSubschemas, `true`) + `}}`,
		"under a keyword's name":  `{"type":"object","properties":{"const":{"type":"object","properties":{` + over + `}}}}`,
		"allOf":                   `{"type":"object","allOf":[` + strings.Repeat(`{"type":"object"},`, MaxSubschemas) + `{}]}`,
		"where only a $ref looks": `{"type":"object","x-hidden":{"properties":{` + over + `}},"properties":{"a":{"$ref":"#/x-hidden"}}}`,
	} {
		for _, field := range []string{"input", "output"} {
			tool := Tool{Name: "t", Handler: nop, InputSchema: json.RawMessage(schema)}
			if field == "output" {
				tool.InputSchema, tool.OutputSchema = nil, json.RawMessage(schema)
			}
			if _, err := NewRegistry(tool); err == nil || !strings.Contains(err.Error(), "subschemas") {
				t.Errorf("%s, %s schema: err = %v, want it refused for its subschemas", name, field, err)
			}
		}
	}
	// What stays: a schema at the bound, and values (an enum of objects)
	// however many.
	for name, schema := range map[string]string{
		"at the bound":      `{"type":"object","properties":{` + props(MaxSubschemas-1, `{"type":"string"}`) + `}}`,
		"an enum of values": `{"type":"object","properties":{"a":{"enum":[` + strings.Repeat(`{"k":1},`, 2*MaxSubschemas) + `{}]}}}`,
	} {
		if _, err := NewRegistry(Tool{Name: "t", Handler: nop, InputSchema: json.RawMessage(schema)}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The validator checks a value against every subschema it reaches in
// place, each as often as it is reached, so a schema whose in-place paths
// multiply (a chain of definitions, each an anyOf of the next one twice:
// 20 of them are 1.3 KB and 2^20 checks, 18 s of CPU on each call) is
// refused, wherever in the schema it is; a chain of 10 (1,024 checks), a
// recursive schema and a tree of properties (each part of a value meets
// one schema) are not.
func TestSchemaChecksBounded(t *testing.T) {
	t.Parallel()
	chain := func(n int, kw string) string {
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{"a":{"$ref":"#/$defs/d0"}},"$defs":{`)
		for i := range n {
			if kw == "properties" {
				fmt.Fprintf(&b, `"d%d":{"type":"object","properties":{"x":{"$ref":"#/$defs/d%d"},"y":{"$ref":"#/$defs/d%d"}}},`, i, i+1, i+1)
				continue
			}
			fmt.Fprintf(&b, `"d%d":{"%s":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, kw, i+1, i+1)
		}
		fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
		return b.String()
	}
	for _, schema := range []string{chain(20, "anyOf"), chain(20, "allOf"), chain(17, "oneOf"),
		// Met deeper in a value: the same checks.
		strings.Replace(chain(20, "anyOf"), `"properties":{"a":{"$ref":"#/$defs/d0"}}`, `"properties":{"a":{"type":"object","properties":{"b":{"$ref":"#/$defs/d0"}}}}`, 1)} {
		for _, field := range []string{"input", "output"} {
			tool := Tool{Name: "t", Handler: nop, InputSchema: json.RawMessage(schema)}
			if field == "output" {
				tool.InputSchema, tool.OutputSchema = nil, json.RawMessage(schema)
			}
			if _, err := NewRegistry(tool); err == nil || !strings.Contains(err.Error(), "in place") {
				t.Errorf("%s schema %.80s…: err = %v; want it refused for its checks", field, schema, err)
			}
		}
	}
	for name, schema := range map[string]string{
		"a chain of 10":      chain(10, "anyOf"),
		"a tree of 20 types": chain(20, "properties"),
		"a recursive schema": `{"type":"object","properties":{"tree":{"$ref":"#/$defs/node"}},"$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}`,
	} {
		if _, err := NewRegistry(Tool{Name: "t", Handler: nop, InputSchema: json.RawMessage(schema)}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
