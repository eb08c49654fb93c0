package tools

import (
	"fmt"
	"strings"
)

// Arguments whose objects name a member twice, exactly or but for case,
// are refused: JSON parsers differ on which one counts. toolwire's
// validator and policies read the last; a parser may read the first, fail,
// or (Go's encoding/json decoding into a struct) match names regardless of
// case, so a value the schema and the policies never saw could reach the
// tool. Names the schema itself declares in more than one case are
// members of their own and may be sent together.

// repeatedReason is the ArgumentError's reason for arguments naming a
// member twice.
func repeatedReason(first, second string) string {
	if first == second {
		return fmt.Sprintf("arguments name the member %q twice in one object; send each member once", first)
	}
	return fmt.Sprintf("arguments have the members %q and %q in one object, names that differ only by case; send each member once, spelled as the input schema spells it", first, second)
}

// caseNames returns the property names schema (a JSON Schema, decoded)
// declares in more than one case, anywhere in it (each spelling); nil when
// none.
func caseNames(schema any) map[string]bool {
	spellings := map[string]string{}
	var out map[string]bool
	eachObject(schema, func(v map[string]any) bool {
		if props, ok := v["properties"].(map[string]any); ok {
			for name := range props {
				lower := strings.ToLower(name)
				if prev, ok := spellings[lower]; ok && prev != name {
					if out == nil {
						out = map[string]bool{}
					}
					out[prev], out[name] = true, true
				}
				spellings[lower] = name
			}
		}
		return true
	})
	return out
}

// eachObject calls visit with every object in v (decoded JSON), outer
// ones first, until visit returns false.
func eachObject(v any, visit func(map[string]any) bool) bool {
	switch v := v.(type) {
	case map[string]any:
		if !visit(v) {
			return false
		}
		for _, e := range v {
			if !eachObject(e, visit) {
				return false
			}
		}
	case []any:
		for _, e := range v {
			if !eachObject(e, visit) {
				return false
			}
		}
	}
	return true
}
