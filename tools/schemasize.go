package tools

import (
	"net/url"
	"reflect"
	"strconv"
	"strings"
)

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

// MaxSchemaChecks bounds the subschemas one part of a value may be
// checked against in place: through allOf, anyOf, oneOf, not,
// if/then/else, dependentSchemas and local $refs, each counted as often
// as it is reached. The validator visits each: a chain of 20
// definitions, each an anyOf of the next one twice, is 1.3 KB of schema
// and 2^20 checks of one value, 18 s of CPU on every call of its tool;
// at 40 the call would never end. The tools of seven public API
// documents need at most a few dozen.
const MaxSchemaChecks = 10_000

// inPlaceKeywords apply their subschemas to the value their schema
// checks, not to a part of it.
var inPlaceKeywords = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "not": true,
	"if": true, "then": true, "else": true, "dependentSchemas": true, "dependencies": true}

// schemaChecks returns the most subschemas that one part of a value may
// be checked against in place under any of doc's schemas (see
// MaxSchemaChecks), stopping once past limit. A $ref is followed when it
// points into doc ("#", "#/…"); a cycle of in-place references (which
// the validator refuses as it meets it) counts once.
func schemaChecks(doc any, limit int) int {
	memo := map[uintptr]int{}
	const busy = -1
	var checks func(v any) int
	checks = func(v any) int {
		m, ok := v.(map[string]any)
		if !ok {
			return 1 // true, false, or not a schema
		}
		key := reflect.ValueOf(m).Pointer()
		switch n, seen := memo[key]; {
		case seen && n == busy:
			return 1
		case seen:
			return n
		}
		memo[key] = busy
		n := 1
		add := func(c int) { n = min(n+c, limit+1) }
		for k, sub := range m {
			switch {
			case k == "$ref" || k == "$dynamicRef":
				if ref, ok := sub.(string); ok {
					if target, ok := pointTo(doc, ref); ok {
						add(checks(target))
					}
				}
			case !inPlaceKeywords[k]:
			case namedSchemaKeywords[k]:
				if named, ok := sub.(map[string]any); ok {
					for _, s := range named {
						add(checks(s))
					}
				}
			default:
				if list, ok := sub.([]any); ok {
					for _, s := range list {
						add(checks(s))
					}
				} else {
					add(checks(sub))
				}
			}
		}
		memo[key] = n
		return n
	}
	// Every object in doc may be a schema some part of a value meets.
	most := 0
	eachObject(doc, func(m map[string]any) bool {
		most = max(most, checks(m))
		return most <= limit
	})
	return most
}

// pointTo returns the part of doc a local reference names: "#" or a JSON
// pointer after it.
func pointTo(doc any, ref string) (any, bool) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, false
	}
	if frag == "" {
		return doc, true
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, false // an anchor: not followed
	}
	if u, err := url.PathUnescape(frag); err == nil {
		frag = u
	}
	cur := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			if cur, ok = c[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
