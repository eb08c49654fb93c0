package tools

// MaxSubschemas bounds the subschemas one tool's input or output schema
// may hold. The schema compiler looks each subschema up in a list of
// those it has queued (santhosh-tekuri/jsonschema v6.0.3, Compiler.enqueue),
// so compiling costs the square of their number: 8,000 took 0.6 s of CPU,
// 32,000 took 12 s, and a 64 MiB schema from an upstream that lists it
// would have held a core for days. The largest of seven public API
// documents' tools (GitHub, Stripe, Kubernetes, Zoom, Box, DigitalOcean,
// Asana) holds about 700; at this bound a schema compiles in about a
// quarter of a second.
const MaxSubschemas = 5000

// valueKeywords hold JSON values, not subschemas: nothing under them is
// compiled (unless a $ref points there, which the compiler resolves as
// it would anywhere; those are counted with the rest below).
var valueKeywords = map[string]bool{"enum": true, "const": true, "default": true, "examples": true, "example": true}

// namedSchemaKeywords hold an object of subschemas keyed by name: a name
// there is not a keyword, whatever it reads.
var namedSchemaKeywords = map[string]bool{
	"properties": true, "patternProperties": true, "$defs": true,
	"definitions": true, "dependentSchemas": true, "dependencies": true,
}

// countSubschemas counts the schemas in doc (a schema decoded by
// jsonschema.UnmarshalJSON), stopping once the count passes limit. It
// errs toward more: every object outside a value keyword counts, as does
// every boolean where a schema stands, since a $ref may make a schema of
// any object in the document.
func countSubschemas(doc any, limit int) int {
	n := 0
	var schema, value func(v any)
	// schema counts v, which stands where a schema does.
	schema = func(v any) {
		if n > limit {
			return
		}
		switch v := v.(type) {
		case bool:
			n++
		case map[string]any:
			n++
			for k, sub := range v {
				switch {
				case valueKeywords[k]:
				case namedSchemaKeywords[k]:
					if named, ok := sub.(map[string]any); ok {
						for _, s := range named {
							schema(s)
						}
					} else {
						value(sub)
					}
				default:
					value(sub)
				}
			}
		case []any:
			for _, s := range v {
				schema(s)
			}
		}
	}
	// value counts the objects in v, a keyword's value: a schema
	// (items, not, allOf's members) or anything else a $ref could name.
	value = func(v any) {
		switch v.(type) {
		case map[string]any, []any:
			schema(v)
		}
	}
	schema(doc)
	return n
}
