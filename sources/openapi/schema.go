package openapi

import (
	"maps"
	"regexp"
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
)

// Limits of the JSON Schema derived from a document's schemas. The loader
// resolves every $ref into a pointer, so a recursive schema (a Node whose
// children are Nodes) is a cycle; it is unrolled, and where a limit is
// reached the schema becomes {} (any value), which still validates.
const (
	// maxRecursion is how many times a schema may appear inside itself
	// before it is cut: a Node's children are Nodes, their children are
	// cut.
	maxRecursion = 2
	// maxDepth bounds nesting of any kind.
	maxDepth = 16
	// maxNodes bounds the schemas one tool's schema holds, so a document
	// whose recursive schemas branch widely cannot explode.
	maxNodes = 4000
)

// converter turns a document's schemas into JSON Schema 2020-12 as the
// registry compiles it: OpenAPI 3.0's nullable and boolean exclusive
// bounds become 2020-12's, allOf of object schemas is merged into one,
// readOnly properties leave request schemas (writeOnly ones response
// schemas), and what has no meaning to a validator (xml, examples,
// discriminator, extensions) is dropped.
type converter struct {
	request bool // converting a request schema (else a response's)
	nodes   int
	onPath  map[*openapi3.Schema]int
}

func newConverter(request bool) *converter {
	return &converter{request: request, onPath: map[*openapi3.Schema]int{}}
}

// schema converts ref; nil is {}.
func (c *converter) schema(ref *openapi3.SchemaRef, depth int) map[string]any {
	if ref == nil || ref.Value == nil {
		return map[string]any{}
	}
	s := ref.Value
	c.nodes++
	if depth > maxDepth || c.nodes > maxNodes || c.onPath[s] >= maxRecursion {
		return map[string]any{}
	}
	c.onPath[s]++
	defer func() { c.onPath[s]-- }()

	if s.Always != nil {
		if *s.Always {
			return map[string]any{}
		}
		return map[string]any{"not": map[string]any{}}
	}
	out := map[string]any{}
	if s.Type != nil && !s.Type.IsEmpty() {
		types := slices.Clone(s.Type.Slice())
		if s.Nullable && !slices.Contains(types, "null") {
			types = append(types, "null")
		}
		if len(types) == 1 {
			out["type"] = types[0]
		} else {
			out["type"] = types
		}
	}
	if s.Title != "" {
		out["title"] = s.Title
	}
	if s.Description != "" {
		out["description"] = s.Description
	}
	if s.Format != "" {
		out["format"] = s.Format
	}
	if len(s.Enum) > 0 {
		enum := s.Enum
		if s.Nullable && !slices.Contains(enum, any(nil)) {
			enum = append(slices.Clone(enum), nil)
		}
		out["enum"] = enum
	}
	if s.Const != nil {
		out["const"] = s.Const
	}
	if s.Default != nil {
		out["default"] = s.Default
	}
	if s.Deprecated {
		out["deprecated"] = true
	}
	// Numbers.
	if s.Min != nil {
		out["minimum"] = *s.Min
	}
	if s.Max != nil {
		out["maximum"] = *s.Max
	}
	bound := func(b openapi3.ExclusiveBound, limit *float64, exclusive, inclusive string) {
		switch {
		case b.Value != nil:
			out[exclusive] = *b.Value
		case b.IsTrue() && limit != nil: // 3.0: a flag on minimum/maximum
			out[exclusive] = *limit
			delete(out, inclusive)
		}
	}
	bound(s.ExclusiveMin, s.Min, "exclusiveMinimum", "minimum")
	bound(s.ExclusiveMax, s.Max, "exclusiveMaximum", "maximum")
	if s.MultipleOf != nil && *s.MultipleOf > 0 {
		out["multipleOf"] = *s.MultipleOf
	}
	// Strings. A pattern Go's regexp cannot compile (ECMA lookarounds) is
	// dropped rather than failing the tool: it only narrows what is valid.
	if s.MinLength > 0 {
		out["minLength"] = s.MinLength
	}
	if s.MaxLength != nil {
		out["maxLength"] = *s.MaxLength
	}
	if s.Pattern != "" {
		if _, err := regexp.Compile(s.Pattern); err == nil {
			out["pattern"] = s.Pattern
		}
	}
	// Arrays.
	if s.Items != nil {
		out["items"] = c.schema(s.Items, depth+1)
	}
	if len(s.PrefixItems) > 0 {
		out["prefixItems"] = c.list(s.PrefixItems, depth)
	}
	if s.MinItems > 0 {
		out["minItems"] = s.MinItems
	}
	if s.MaxItems != nil {
		out["maxItems"] = *s.MaxItems
	}
	if s.UniqueItems {
		out["uniqueItems"] = true
	}
	// Objects.
	if len(s.Properties) > 0 {
		props := map[string]any{}
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			p := s.Properties[name]
			if p != nil && p.Value != nil && ((c.request && p.Value.ReadOnly) || (!c.request && p.Value.WriteOnly)) {
				continue
			}
			props[name] = c.schema(p, depth+1)
		}
		out["properties"] = props
		var req []string
		for _, r := range s.Required {
			if _, ok := props[r]; ok && !slices.Contains(req, r) {
				req = append(req, r)
			}
		}
		if len(req) > 0 {
			out["required"] = req
		}
	} else if len(s.Required) > 0 {
		out["required"] = slices.Compact(slices.Sorted(slices.Values(s.Required)))
	}
	switch ap := s.AdditionalProperties; {
	case ap.Has != nil && !*ap.Has:
		out["additionalProperties"] = false
	case ap.Schema != nil:
		out["additionalProperties"] = c.schema(ap.Schema, depth+1)
	}
	if s.MinProps > 0 {
		out["minProperties"] = s.MinProps
	}
	if s.MaxProps != nil {
		out["maxProperties"] = *s.MaxProps
	}
	// Combinators.
	if len(s.OneOf) > 0 {
		out["oneOf"] = c.list(s.OneOf, depth)
	}
	if len(s.AnyOf) > 0 {
		out["anyOf"] = c.list(s.AnyOf, depth)
	}
	if len(s.AllOf) > 0 {
		merged, rest := c.mergeAllOf(out, s.AllOf, depth)
		out = merged
		if len(rest) > 0 {
			out["allOf"] = rest
		}
	}
	if s.Not != nil {
		out["not"] = c.schema(s.Not, depth+1)
	}
	return out
}

func (c *converter) list(refs openapi3.SchemaRefs, depth int) []any {
	out := make([]any, 0, len(refs))
	for _, r := range refs {
		out = append(out, c.schema(r, depth+1))
	}
	return out
}

// mergeAllOf folds allOf's object schemas into out: their properties and
// required names are unioned (the first definition of a property wins),
// and a keyword out lacks is taken from the first that has it. What cannot
// be merged (an allOf member with its own combinators) stays an allOf.
func (c *converter) mergeAllOf(out map[string]any, all openapi3.SchemaRefs, depth int) (map[string]any, []any) {
	var rest []any
	for _, r := range all {
		m := c.schema(r, depth+1)
		if _, ok := m["oneOf"]; ok {
			rest = append(rest, m)
			continue
		}
		if _, ok := m["anyOf"]; ok {
			rest = append(rest, m)
			continue
		}
		if _, ok := m["allOf"]; ok {
			rest = append(rest, m)
			continue
		}
		if _, ok := m["not"]; ok {
			rest = append(rest, m)
			continue
		}
		for k, v := range m {
			switch k {
			case "properties":
				props, _ := out["properties"].(map[string]any)
				if props == nil {
					props = map[string]any{}
				}
				for name, p := range v.(map[string]any) {
					if _, ok := props[name]; !ok {
						props[name] = p
					}
				}
				out["properties"] = props
			case "additionalProperties":
				// false in one member would refuse the others' properties.
				if v != false {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
			case "required":
				req, _ := out["required"].([]string)
				for _, r := range v.([]string) {
					if !slices.Contains(req, r) {
						req = append(req, r)
					}
				}
				out["required"] = req
			default:
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
	}
	return out, rest
}
