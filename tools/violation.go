package tools

import (
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// explain says what the violation e means. The validator reports the
// idiom for properties that exclude each other (a protobuf oneof's
// fields, say),
//
//	"dependentSchemas": {"a": {"properties": {"b": false}}}
//
// (b may not be present when a is) as "false schema" at b, which does
// not say why; this names a and b.
func explain(e *jsonschema.ValidationError) string {
	if _, ok := e.ErrorKind.(*kind.FalseSchema); ok {
		if a, b, ok := excludedBy(e.SchemaURL); ok {
			return fmt.Sprintf("%q cannot be set together with %q: set at most one of them", b, a)
		}
	}
	return e.ErrorKind.LocalizedString(printer)
}

// excludedBy reads a and b from a schema location ending in
// /dependentSchemas/a/properties/b.
func excludedBy(schemaURL string) (a, b string, ok bool) {
	_, frag, found := strings.Cut(schemaURL, "#")
	if !found {
		return "", "", false
	}
	toks := strings.Split(frag, "/")
	if len(toks) < 5 {
		return "", "", false
	}
	toks = toks[len(toks)-4:]
	if toks[0] != "dependentSchemas" || toks[2] != "properties" {
		return "", "", false
	}
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	return unescape.Replace(toks[1]), unescape.Replace(toks[3]), true
}
