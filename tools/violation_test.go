package tools

import (
	"encoding/json"
	"errors"
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
