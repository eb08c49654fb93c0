package tools

import (
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// reported tells whether violations reports e itself rather than its
// causes: a key of an object that propertyNames refuses, whose causes
// the validator places at the root ("/") instead of at the object.
func reported(e *jsonschema.ValidationError) bool {
	_, ok := e.ErrorKind.(*kind.PropertyNames)
	return ok || len(e.Causes) == 0
}

// explain says what the violation e (one violations reports) means. Two
// of the validator's words are made to say it:
//
//   - the idiom for properties that exclude each other (a protobuf
//     oneof's fields, say), "dependentSchemas": {"a": {"properties":
//     {"b": false}}}, is "false schema" at b: it names a and b instead;
//   - a key propertyNames refuses says why, with its causes' words.
func explain(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.FalseSchema:
		if a, b, ok := excludedBy(e.SchemaURL); ok {
			return fmt.Sprintf("%q cannot be set together with %q: set at most one of them", b, a)
		}
	case *kind.PropertyNames:
		var why []string
		var walk func(e *jsonschema.ValidationError)
		walk = func(e *jsonschema.ValidationError) {
			if len(e.Causes) == 0 {
				why = append(why, e.ErrorKind.LocalizedString(printer))
			}
			for _, c := range e.Causes {
				walk(c)
			}
		}
		walk(e)
		return fmt.Sprintf("key %q is not allowed: %s", k.Property, strings.Join(why, "; "))
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
