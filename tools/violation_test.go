package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestViolationWords: properties that exclude each other (the
// dependentSchemas idiom, here a oneof of three, nested under a $ref) name
// the two that conflict, rather than "false schema" as the validator
// words it.
func TestViolationWords(t *testing.T) {
	t.Parallel()
	schema := `{
		"type": "object",
		"$defs": {"choice": {"type": "object",
			"properties": {"a": {"type": "string"}, "b/c": {"type": "string"}, "d": {"type": "string"}},
			"dependentSchemas": {"a": {"properties": {"b/c": false, "d": false}}, "b/c": {"properties": {"d": false}}}}},
		"properties": {
			"pick": {"$ref": "#/$defs/choice"},
			"off": {"type": "object", "properties": {"x": false}}
		}
	}`
	r, err := NewRegistry(Tool{Name: "t", InputSchema: json.RawMessage(schema), Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Snapshot().Lookup("t")
	_, err = tool.ValidateArguments(`{"pick":{"a":"1","b/c":"2","d":"3"},"off":{"x":1}}`)
	var ae *ArgumentError
	if !errors.As(err, &ae) {
		t.Fatalf("not an ArgumentError: %v", err)
	}
	want := []string{
		`/off/x: false schema`, // not the idiom: said as before
		`/pick/b/c: "b/c" cannot be set together with "a": set at most one of them`,
		`/pick/d: "d" cannot be set together with "a": set at most one of them`,
		`/pick/d: "d" cannot be set together with "b/c": set at most one of them`,
	}
	if diff := cmp.Diff(want, ae.Violations); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// TestViolationsBounded: arguments or structured content that break the
// schema in every element of a long array name the first MaxViolations
// violations and how many more there were. Every one was listed: an
// OpenAPI upstream answering 900,000 strings where its schema says
// integers made one call's warn line 38.6 MB.
func TestViolationsBounded(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"items":{"type":"array","items":{"type":"integer"}}}}`)
	r, err := NewRegistry(Tool{Name: "t", InputSchema: schema, OutputSchema: schema, Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Snapshot().Lookup("t")
	doc := `{"items":["a"` + strings.Repeat(`,"a"`, 9999) + `]}`
	_, inErr := tool.ValidateArguments(doc)
	outErr := tool.ValidateOutput(json.RawMessage(doc))
	for name, err := range map[string]error{"arguments": inErr, "structured content": outErr} {
		var ae *ArgumentError
		if !errors.As(err, &ae) {
			t.Fatalf("%s: not an ArgumentError: %v", name, err)
		}
		if n := len(ae.Violations); n != MaxViolations+1 || len(err.Error()) > 4096 {
			t.Errorf("%s: %d violations, %d bytes of error; want %d and the rest counted", name, n, len(err.Error()), MaxViolations)
		}
		if last := ae.Violations[len(ae.Violations)-1]; last != "… and 9980 more" {
			t.Errorf("%s: the last entry is %q; want the count of those left out", name, last)
		}
		if first := ae.Violations[0]; !strings.HasPrefix(first, "/items/0: ") {
			t.Errorf("%s: the first entry is %q", name, first)
		}
	}
}
