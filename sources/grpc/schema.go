package grpcsource

import (
	"math"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Limits of the JSON Schema derived from a message. A message inside
// itself (a tree) is unrolled maxRecursion times, then any value there;
// nesting deeper than maxDepth or past maxNodes schemas is cut the same
// way, so any descriptor gives a small schema.
const (
	maxRecursion = 2
	maxDepth     = 24
	maxNodes     = 4000
)

// schemaGen derives JSON Schema 2020-12 from message descriptors following
// the protobuf JSON mapping (protojson): fields by their JSON names,
// 64-bit integers as decimal strings, enums as value names, bytes as
// base64, well-known types as their JSON forms, a oneof's fields mutually
// exclusive, maps as objects. Descriptions come from the proto comments
// when the descriptors carry source info.
type schemaGen struct {
	output bool // a response's schema: enums may also be numbers, nothing is required
	nodes  int
	onPath map[protoreflect.FullName]int
}

func newSchemaGen(output bool) *schemaGen {
	return &schemaGen{output: output, onPath: map[protoreflect.FullName]int{}}
}

// message is md's schema.
func (g *schemaGen) message(md protoreflect.MessageDescriptor, depth int) map[string]any {
	g.nodes++
	if s := wellKnown(md); s != nil {
		return s
	}
	name := md.FullName()
	if depth > maxDepth || g.nodes > maxNodes || g.onPath[name] >= maxRecursion {
		return map[string]any{"description": "(" + string(name) + ": nested too deep to describe)"}
	}
	g.onPath[name]++
	defer func() { g.onPath[name]-- }()

	props := map[string]any{}
	var required []string
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		s := g.field(f, depth+1)
		if c := comments(f); c != "" {
			// The field's comment first, then what its type says.
			if d, ok := s["description"].(string); ok && d != "" {
				c += "\n\n" + d
			}
			s["description"] = c
		}
		props[f.JSONName()] = s
		if !g.output && f.Cardinality() == protoreflect.Required {
			required = append(required, f.JSONName())
		}
	}
	out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		out["required"] = required
	}
	if c := comments(md); c != "" {
		out["description"] = c
	}
	// A oneof's fields exclude each other: each present one forbids the
	// others (synthetic oneofs of proto3 optional fields have one field).
	dependent := map[string]any{}
	oneofs := md.Oneofs()
	for i := range oneofs.Len() {
		o := oneofs.Get(i)
		if o.IsSynthetic() || o.Fields().Len() < 2 {
			continue
		}
		for j := range o.Fields().Len() {
			var others []any
			for k := range o.Fields().Len() {
				if k != j {
					others = append(others, map[string]any{"required": []string{o.Fields().Get(k).JSONName()}})
				}
			}
			dependent[o.Fields().Get(j).JSONName()] = map[string]any{"not": map[string]any{"anyOf": others}}
		}
	}
	if len(dependent) > 0 {
		out["dependentSchemas"] = dependent
	}
	return out
}

// field is f's schema: a list, a map or a single value.
func (g *schemaGen) field(f protoreflect.FieldDescriptor, depth int) map[string]any {
	switch {
	case f.IsMap():
		return map[string]any{"type": "object", "additionalProperties": g.single(f.MapValue(), depth+1)}
	case f.IsList():
		return map[string]any{"type": "array", "items": g.single(f, depth+1)}
	}
	return g.single(f, depth)
}

// single is the schema of one value of f's kind.
func (g *schemaGen) single(f protoreflect.FieldDescriptor, depth int) map[string]any {
	switch f.Kind() {
	case protoreflect.BoolKind:
		return map[string]any{"type": "boolean"}
	case protoreflect.StringKind:
		return map[string]any{"type": "string"}
	case protoreflect.BytesKind:
		return bytesSchema()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return map[string]any{"type": "integer", "minimum": math.MinInt32, "maximum": math.MaxInt32}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return map[string]any{"type": "integer", "minimum": 0, "maximum": math.MaxUint32}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return int64Schema(true)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return int64Schema(false)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return floatSchema()
	case protoreflect.EnumKind:
		return g.enum(f.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return g.message(f.Message(), depth)
	}
	return map[string]any{}
}

func (g *schemaGen) enum(ed protoreflect.EnumDescriptor) map[string]any {
	if ed.FullName() == "google.protobuf.NullValue" {
		return map[string]any{"type": "null"}
	}
	vals := ed.Values()
	names := make([]any, 0, vals.Len())
	for i := range vals.Len() {
		names = append(names, string(vals.Get(i).Name()))
	}
	s := map[string]any{"type": "string", "enum": names}
	if c := comments(ed); c != "" {
		s["description"] = c
	}
	if g.output {
		// protojson writes a value the descriptor does not name as its number.
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "integer"}}}
	}
	return s
}

func int64Schema(signed bool) map[string]any {
	if signed {
		return map[string]any{"type": "string", "pattern": `^-?[0-9]+$`, "description": "a 64-bit integer, as a decimal string"}
	}
	return map[string]any{"type": "string", "pattern": `^[0-9]+$`, "description": "an unsigned 64-bit integer, as a decimal string"}
}

func floatSchema() map[string]any {
	return map[string]any{"anyOf": []any{map[string]any{"type": "number"}, map[string]any{"enum": []any{"NaN", "Infinity", "-Infinity"}}}}
}

func bytesSchema() map[string]any {
	return map[string]any{"type": "string", "contentEncoding": "base64"}
}

// wellKnown is the schema of a well-known type's JSON form, or nil.
func wellKnown(md protoreflect.MessageDescriptor) map[string]any {
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return map[string]any{"type": "string", "format": "date-time", "description": "an RFC 3339 time, as 2006-01-02T15:04:05Z"}
	case "google.protobuf.Duration":
		return map[string]any{"type": "string", "pattern": `^-?[0-9]+(\.[0-9]{1,9})?s$`, "description": "a duration in seconds with an s, as 1.5s"}
	case "google.protobuf.Struct":
		return map[string]any{"type": "object"}
	case "google.protobuf.Value":
		return map[string]any{}
	case "google.protobuf.ListValue":
		return map[string]any{"type": "array"}
	case "google.protobuf.FieldMask":
		return map[string]any{"type": "string", "description": "field paths, comma-separated, in lowerCamelCase"}
	case "google.protobuf.Any":
		return map[string]any{"type": "object", "properties": map[string]any{"@type": map[string]any{"type": "string"}}, "required": []string{"@type"}}
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue":
		return floatSchema()
	case "google.protobuf.Int64Value":
		return int64Schema(true)
	case "google.protobuf.UInt64Value":
		return int64Schema(false)
	case "google.protobuf.Int32Value":
		return map[string]any{"type": "integer", "minimum": math.MinInt32, "maximum": math.MaxInt32}
	case "google.protobuf.UInt32Value":
		return map[string]any{"type": "integer", "minimum": 0, "maximum": math.MaxUint32}
	case "google.protobuf.BoolValue":
		return map[string]any{"type": "boolean"}
	case "google.protobuf.StringValue":
		return map[string]any{"type": "string"}
	case "google.protobuf.BytesValue":
		return bytesSchema()
	}
	return nil
}

// comments are d's leading comments (else trailing), when its file
// carries source info.
func comments(d protoreflect.Descriptor) string {
	f := d.ParentFile()
	if f == nil {
		return ""
	}
	loc := f.SourceLocations().ByDescriptor(d)
	c := strings.TrimSpace(loc.LeadingComments)
	if c == "" {
		c = strings.TrimSpace(loc.TrailingComments)
	}
	return c
}
