package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestDeepValuesUnderMultiplyingSchemas: a recursive tagged union (each
// variant holding the same recursive property) made the validator check
// the parts below each level once per variant, so a valid value 16 levels
// deep took 0.24 s and each level more doubled it, on every call. Such a
// value is now refused before it is validated, saying why; the same
// schema's shallow values, a deep value under a tree of properties, and a
// wide value are checked as before.
func TestDeepValuesUnderMultiplyingSchemas(t *testing.T) {
	t.Parallel()
	const union = `{"type":"object","properties":{"expr":{"$ref":"#/$defs/e"}},"$defs":{"e":{"oneOf":[
		{"type":"object","properties":{"op":{"const":"and"},"args":{"type":"array","items":{"$ref":"#/$defs/e"}},"next":{"$ref":"#/$defs/e"}},"required":["op"]},
		{"type":"object","properties":{"op":{"const":"or"},"args":{"type":"array","items":{"$ref":"#/$defs/e"}},"next":{"$ref":"#/$defs/e"}},"required":["op"]}]}}}`
	const tree = `{"type":"object","properties":{"expr":{"$ref":"#/$defs/e"}},"$defs":{"e":{"type":"object","properties":{"op":{"type":"string"},"left":{"$ref":"#/$defs/e"},"right":{"$ref":"#/$defs/e"}}}}}`
	nested := func(key, op string, depth int, leaf string) string {
		return `{"expr":` + strings.Repeat(`{"op":"`+op+`","`+key+`":`, depth) + leaf + strings.Repeat(`}`, depth) + `}`
	}
	prepare := func(schema string) *Tool {
		t.Helper()
		reg, err := NewRegistry(Tool{Name: "t", InputSchema: json.RawMessage(schema), OutputSchema: json.RawMessage(schema),
			Handler: func(context.Context, *Call) (*Result, error) { return nil, nil }})
		if err != nil {
			t.Fatal(err)
		}
		tool, _ := reg.Snapshot().Lookup("t")
		return tool
	}
	u := prepare(union)
	const refused = "subschema checks to check against the tool's schema"
	for _, tc := range []struct {
		args string
		want string // "" valid, else in the error
	}{
		{nested("next", "or", 6, `{"op":"or"}`), ""},
		{nested("next", "or", 6, `{"op":"not"}`), "do not match"},
		{`{"expr":{"op":"and","args":[` + strings.Repeat(`{"op":"or","next":{"op":"and"}},`, 3000) + `{"op":"or"}]}}`, ""}, // wide: 9,000 parts
		// 40 levels: 2^40 checks if every variant were followed. The "and"
		// variant comes first, so the validator itself would be quick on
		// this one; the walk refuses it all the same, since another value
		// of the same shape ("or" at each level) would not be.
		{nested("next", "and", 40, `{"op":"and"}`), refused},
	} {
		_, err := u.ValidateArguments(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%.60s…: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%.60s…: %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
	if err := u.ValidateOutput(json.RawMessage(nested("next", "and", 40, `{"op":"and"}`))); err == nil || !strings.Contains(err.Error(), "the structured content would take more than") {
		t.Errorf("deep structured content under the union: %v; want it refused", err)
	}
	// A tree of properties multiplies nothing: each part meets one schema.
	tr := prepare(tree)
	if tr.inputCost != nil {
		t.Error("a tree of properties is walked before every call; it cannot multiply")
	}
	if _, err := tr.ValidateArguments(nested("left", "x", 500, `{"op":"y"}`)); err != nil {
		t.Errorf("500 levels under a tree of properties: %v", err)
	}
}

// TestNumbersPastTheValidator: a number whose exponent math/big will not
// take (1e9999999) made the validator dereference nil and crash the
// server, for any schema with a minimum, maximum or multipleOf; one just
// under it cost 50 ms each. Both are refused, saying where; numbers a
// tool could mean are checked as before, and a validator's panic is the
// value's refusal.
func TestNumbersPastTheValidator(t *testing.T) {
	t.Parallel()
	const schema = `{"type":"object","properties":{"n":{"type":"number","maximum":10.5,"multipleOf":0.5},"i":{"type":"integer"},"s":{"type":"string"},"b":{"type":"boolean"},"list":{"type":"array","items":{"type":"number","minimum":0}}}}`
	reg, err := NewRegistry(Tool{Name: "t", InputSchema: json.RawMessage(schema), OutputSchema: json.RawMessage(schema),
		Handler: func(context.Context, *Call) (*Result, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Snapshot().Lookup("t")
	for _, tc := range []struct{ args, want string }{
		{`{"n":1e9999999}`, "at /n (1e9999999)"},
		{`{"n":-1E+9999999}`, "at /n (-1E+9999999)"},
		{`{"list":[1,2,1.5e999999]}`, "at /list/2 (1.5e999999)"},
		{`{"n":1e-401}`, "at /n"},
		{`{"n":0.` + strings.Repeat("1", 401) + `}`, "at /n (0.111111111111111111…1111111111)"},
		{`{"n":10.5}`, ""},
		{`{"n":1e-400}`, "do not match"},                           // not a multiple of 0.5
		{`{"n":2.5e0, "list":[1e400]}`, ""},                        // huge, yet a number a check can take
		{`{"n":` + strings.Repeat("9", 400) + `}`, "do not match"}, // past the maximum
	} {
		_, err := tool.ValidateArguments(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%.60s: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%.60s: %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
	if err := tool.ValidateOutput(json.RawMessage(`{"n":1e9999999}`)); err == nil || !strings.Contains(err.Error(), "a number in the structured content cannot be checked, at /n") {
		t.Errorf("structured content with 1e9999999: %v", err)
	}
	// A schema's numbers are bounded alike: this multipleOf crashed the
	// compiler.
	for _, s := range []string{`{"type":"object","properties":{"n":{"multipleOf":1e-9999999}}}`, `{"type":"object","properties":{"n":{"multipleOf":1.5e999999}}}`} {
		_, err := NewRegistry(Tool{Name: "t", InputSchema: json.RawMessage(s), Handler: func(context.Context, *Call) (*Result, error) { return nil, nil }})
		if err == nil || !strings.Contains(err.Error(), "a number in the schema cannot be checked, at /properties/n/multipleOf") {
			t.Errorf("%s: %v", s, err)
		}
	}
	// What a validator's panic becomes.
	if err := validate(nil, map[string]any{}, "arguments"); err == nil || !strings.Contains(err.Error(), "arguments could not be checked against the schema") {
		t.Errorf("a validator that panics: %v", err)
	}
}
