package grpcsource

import (
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Limits of the JSON Schema derived from a message. Each message type is
// described once, so a schema grows with the number of types a method
// reaches, not with how deep they nest; past maxNodes fields in one
// schema, or maxTypes types, a message accepts any value, so any
// descriptor gives a bounded schema. A message nested deeper than
// maxDepth inline is moved to $defs, so the schema's own nesting stays
// shallow too.
const (
	maxNodes = 8000
	maxTypes = 2000
	maxDepth = 16
)

// Names of the $defs entries for scalars whose check is a long pattern.
// They hold a "-", which no protobuf name does, so no message's entry
// (by its full name) can take them.
const (
	defInt64     = "int64-string"
	defUint64    = "uint64-string"
	defTimestamp = "google.protobuf.Timestamp"
	defDuration  = "google.protobuf.Duration"
)

// schemaGen derives JSON Schema 2020-12 from message descriptors following
// the protobuf JSON mapping (protojson): fields by their JSON names,
// 64-bit integers as decimal strings, enums as value names, bytes as
// base64, well-known types as their JSON forms with patterns that hold
// them to what protojson reads, a oneof's fields mutually exclusive, maps
// as objects. Descriptions come from the proto comments when the
// descriptors carry source info.
//
// A message type used by more than one field, or inside itself, is
// described once under $defs (named by its full name) and referenced
// with $ref; the root message is "#". The root stays an object schema, as
// models' providers require.
type schemaGen struct {
	output bool // a response's schema: enums may also be numbers, nothing is required
	root   protoreflect.FullName
	refs   map[protoreflect.FullName]int // fields of the reachable types referring to each type
	defs   map[string]any
	nodes  int
}

// inputSchema is the schema of md as a request: arguments are checked
// against it before the call.
func inputSchema(md protoreflect.MessageDescriptor) map[string]any {
	return newSchemaGen(false).document(md)
}

// outputSchema is the schema of md as a response.
func outputSchema(md protoreflect.MessageDescriptor) map[string]any {
	return newSchemaGen(true).document(md)
}

func newSchemaGen(output bool) *schemaGen {
	return &schemaGen{output: output, defs: map[string]any{}}
}

// document is md's schema as a whole: md's own at the root, with the
// $defs its fields refer to.
func (g *schemaGen) document(md protoreflect.MessageDescriptor) map[string]any {
	if s := g.wellKnown(md); s != nil {
		return g.withDefs(s)
	}
	g.root = md.FullName()
	g.refs = countRefs(md)
	return g.withDefs(g.body(md, 0))
}

// streamDocument is the schema of a server-streaming call's result: the
// response messages that arrived, in order, and why the list may be
// incomplete.
func (g *schemaGen) streamDocument(md protoreflect.MessageDescriptor) map[string]any {
	g.refs = countRefs(md)
	g.refs[md.FullName()]++ // the list's items refer to it too
	return g.withDefs(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"messages":   map[string]any{"type": "array", "items": g.message(md, 1)},
			"incomplete": map[string]any{"type": "string", "description": "why the stream's messages end here though the stream had not ended"},
		},
		"required":             []string{"messages"},
		"additionalProperties": false,
	})
}

func (g *schemaGen) withDefs(s map[string]any) map[string]any {
	if len(g.defs) > 0 {
		s["$defs"] = g.defs
	}
	return s
}

// countRefs counts, over the message types reachable from md, the fields
// that refer to each message and enum type (well-known types apart: they
// are never $defs).
func countRefs(md protoreflect.MessageDescriptor) map[protoreflect.FullName]int {
	refs := map[protoreflect.FullName]int{}
	seen := map[protoreflect.FullName]bool{md.FullName(): true}
	queue := []protoreflect.MessageDescriptor{md}
	for len(queue) > 0 && len(seen) <= maxTypes {
		m := queue[0]
		queue = queue[1:]
		fields := m.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if f.IsMap() {
				f = f.MapValue()
			}
			if f.Kind() == protoreflect.EnumKind {
				refs[f.Enum().FullName()]++
				continue
			}
			if f.Kind() != protoreflect.MessageKind && f.Kind() != protoreflect.GroupKind {
				continue
			}
			t := f.Message()
			if isWellKnown(t.FullName()) {
				continue
			}
			refs[t.FullName()]++
			if !seen[t.FullName()] {
				seen[t.FullName()] = true
				queue = append(queue, t)
			}
		}
	}
	return refs
}

// message is the schema of a field whose type is md, at depth fields
// below the document's root or the $defs entry it is written in: md's
// own schema inline when only this field uses it, else a $ref.
func (g *schemaGen) message(md protoreflect.MessageDescriptor, depth int) map[string]any {
	if s := g.wellKnown(md); s != nil {
		return s
	}
	name := md.FullName()
	if name == g.root {
		return map[string]any{"$ref": "#"}
	}
	if g.refs[name] <= 1 && depth <= maxDepth {
		return g.body(md, depth)
	}
	if _, ok := g.defs[string(name)]; !ok {
		if len(g.defs) >= maxTypes {
			return tooLarge(name)
		}
		g.defs[string(name)] = nil // taken: a field inside refers to it, not describe it again
		g.defs[string(name)] = g.body(md, 0)
	}
	return map[string]any{"$ref": "#/$defs/" + string(name)}
}

func tooLarge(name protoreflect.FullName) map[string]any {
	return map[string]any{"description": "(" + string(name) + ": too large to describe)"}
}

// body is md's own schema: an object of its fields.
func (g *schemaGen) body(md protoreflect.MessageDescriptor, depth int) map[string]any {
	fields := md.Fields()
	if g.nodes += fields.Len() + 1; g.nodes > maxNodes {
		return tooLarge(md.FullName())
	}
	props := map[string]any{}
	var required []string
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
	// A oneof's fields exclude each other: each forbids those after it
	// (which covers every pair once), in the form the validator reports
	// as the two fields that conflict. Synthetic oneofs of proto3
	// optional fields have one field.
	dependent := map[string]any{}
	oneofs := md.Oneofs()
	for i := range oneofs.Len() {
		o := oneofs.Get(i)
		if o.IsSynthetic() || o.Fields().Len() < 2 {
			continue
		}
		names := make([]string, o.Fields().Len())
		for j := range names {
			names[j] = o.Fields().Get(j).JSONName()
		}
		for j, name := range names {
			if j+1 < len(names) {
				forbidden := map[string]any{}
				for _, other := range names[j+1:] {
					forbidden[other] = false
				}
				dependent[name] = map[string]any{"properties": forbidden}
			}
			appendDescription(props[name].(map[string]any), fmt.Sprintf("Part of oneof %s: set at most one of its fields.", o.Name()))
		}
		appendDescription(out, fmt.Sprintf("Oneof %s: at most one of %s.", o.Name(), strings.Join(names, ", ")))
	}
	if len(dependent) > 0 {
		out["dependentSchemas"] = dependent
	}
	return out
}

// appendDescription adds a paragraph to s's description.
func appendDescription(s map[string]any, text string) {
	if d, ok := s["description"].(string); ok && d != "" {
		text = d + "\n\n" + text
	}
	s["description"] = text
}

// field is f's schema: a list, a map or a single value.
func (g *schemaGen) field(f protoreflect.FieldDescriptor, depth int) map[string]any {
	switch {
	case f.IsMap():
		value := g.single(f.MapValue(), depth+1)
		if keys, what := g.mapKeys(f.MapKey()); keys != "" {
			// Not propertyNames: the validator reports a key it refuses
			// at a wrong place (it keeps a slice it goes on changing).
			return map[string]any{"type": "object", "patternProperties": map[string]any{keys: value}, "additionalProperties": false,
				"description": "keys: " + what}
		}
		return map[string]any{"type": "object", "additionalProperties": value}
	case f.IsList():
		return map[string]any{"type": "array", "items": g.single(f, depth+1)}
	}
	return g.single(f, depth)
}

// mapKeys is the pattern of a map's keys, JSON object keys, when the key
// type is not a string (the decimal or boolean text protojson reads),
// and what it says; "" for string keys. A response's are not checked (see
// pattern).
func (g *schemaGen) mapKeys(k protoreflect.FieldDescriptor) (pattern, what string) {
	if g.output {
		return "", ""
	}
	switch k.Kind() {
	case protoreflect.BoolKind:
		return "^(?:true|false)$", "true or false"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return int32Pattern, "32-bit integers, in decimal"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return uint32Pattern, "unsigned 32-bit integers, in decimal"
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return int64Pattern, "64-bit integers, in decimal"
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return uint64Pattern, "unsigned 64-bit integers, in decimal"
	}
	return "", ""
}

// single is the schema of one value of f's kind.
func (g *schemaGen) single(f protoreflect.FieldDescriptor, depth int) map[string]any {
	switch f.Kind() {
	case protoreflect.BoolKind:
		return map[string]any{"type": "boolean"}
	case protoreflect.StringKind:
		return map[string]any{"type": "string"}
	case protoreflect.BytesKind:
		return g.bytes()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return map[string]any{"type": "integer", "minimum": math.MinInt32, "maximum": math.MaxInt32}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return map[string]any{"type": "integer", "minimum": 0, "maximum": math.MaxUint32}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return g.def(defInt64)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return g.def(defUint64)
	case protoreflect.FloatKind:
		return floatSchema(math.MaxFloat32)
	case protoreflect.DoubleKind:
		return floatSchema(math.MaxFloat64)
	case protoreflect.EnumKind:
		return g.enum(f.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return g.message(f.Message(), depth)
	}
	return map[string]any{}
}

// enum is the schema of a field of enum type ed: its values inline when
// only this field uses it, else a $ref.
func (g *schemaGen) enum(ed protoreflect.EnumDescriptor) map[string]any {
	name := ed.FullName()
	if name == "google.protobuf.NullValue" {
		return map[string]any{"type": "null"}
	}
	if g.refs[name] <= 1 {
		return g.enumBody(ed)
	}
	if _, ok := g.defs[string(name)]; !ok {
		if len(g.defs) >= maxTypes {
			return tooLarge(name)
		}
		g.defs[string(name)] = g.enumBody(ed)
	}
	return map[string]any{"$ref": "#/$defs/" + string(name)}
}

func (g *schemaGen) enumBody(ed protoreflect.EnumDescriptor) map[string]any {
	if g.nodes += ed.Values().Len()/8 + 1; g.nodes > maxNodes {
		return tooLarge(ed.FullName())
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

// def is a $ref to one of the scalar $defs, which it adds.
func (g *schemaGen) def(name string) map[string]any {
	if _, ok := g.defs[name]; !ok {
		g.defs[name] = g.pattern(scalarDefs[name]())
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// pattern is s, without its pattern in a response's schema: what
// protojson writes needs no check, and Go's regular expressions take some
// 60 ns a byte (a megabyte of bytes field, 60 ms).
func (g *schemaGen) pattern(s map[string]any) map[string]any {
	if g.output {
		delete(s, "pattern")
	}
	return s
}

// scalarDefs are the $defs entries of def.
var scalarDefs = map[string]func() map[string]any{
	defInt64: func() map[string]any {
		return map[string]any{"type": "string", "pattern": int64Pattern, "description": "a 64-bit integer, as a decimal string"}
	},
	defUint64: func() map[string]any {
		return map[string]any{"type": "string", "pattern": uint64Pattern, "description": "an unsigned 64-bit integer, as a decimal string"}
	},
	defTimestamp: func() map[string]any {
		return map[string]any{"type": "string", "format": "date-time", "pattern": timestampPattern,
			"description": "an RFC 3339 time with a time zone, as 2006-01-02T15:04:05Z or 2006-01-02T15:04:05.5+01:00"}
	},
	defDuration: func() map[string]any {
		return map[string]any{"type": "string", "pattern": durationPattern,
			"description": "a duration in seconds with an s, as 1.5s or -0.25s; at most 9 decimals"}
	},
}

// The patterns of arguments hold each JSON form to what protojson reads,
// so that arguments the schema accepts are not refused by the call
// itself.
var (
	int32Pattern  = "^(?:-?" + decimalUpTo("2147483647") + "|-2147483648)$"
	uint32Pattern = "^" + decimalUpTo("4294967295") + "$"
	int64Pattern  = "^(?:-?" + decimalUpTo("9223372036854775807") + "|-9223372036854775808)$"
	uint64Pattern = "^" + decimalUpTo("18446744073709551615") + "$"
	// protojson's Duration: an optional sign, seconds (no leading zeros,
	// at most 315576000000), at most 9 decimals, "s".
	durationPattern = `^[+-]?(?:` + decimalUpTo("315576000000") + `(?:\.[0-9]{0,9})?|\.[0-9]{0,9})s$`
	// RFC 3339 as time.Parse reads it for protojson: years 0001 to 9999,
	// days that exist (February 29th in leap years), at most 9 decimals, a
	// zone.
	timestampPattern = func() string {
		year := `(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})`
		leap := `(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)`
		monthDay := `(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
		clock := `T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
		return `^(?:` + year + `-` + monthDay + `|` + leap + `-02-29)` + clock + `$`
	}()
	// protojson's FieldMask: comma-separated paths of lowerCamelCase names.
	fieldMaskPattern = `^\s*(?:[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*(?:,[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*)*)?\s*$`
	// The letters of standard or URL-safe base64, then padding. The
	// length and a mix of the two alphabets are left to protojson (the
	// call's INVALID_ARGUMENTS): the pattern that checks them too takes
	// ten times as long to match.
	bytesPattern = `^[A-Za-z0-9+/_-]*={0,2}$`
)

// decimalUpTo is a regular expression (a group, unanchored) matching the
// decimal numbers from 0 to max without leading zeros.
func decimalUpTo(max string) string {
	alts := []string{"0"}
	if n := len(max); n > 1 {
		alts = append(alts, fmt.Sprintf("[1-9][0-9]{0,%d}", n-2))
	}
	// Numbers of max's length: max's first i digits, a smaller digit,
	// then any; or max itself.
	for i := range len(max) {
		lo := byte('0')
		if i == 0 {
			lo = '1'
		}
		hi := max[i] - 1
		if hi < lo {
			continue
		}
		digit := fmt.Sprintf("[%c-%c]", lo, hi)
		if lo == hi {
			digit = string(lo)
		}
		alt := max[:i] + digit
		if rest := len(max) - i - 1; rest > 0 {
			alt += fmt.Sprintf("[0-9]{%d}", rest)
		}
		alts = append(alts, alt)
	}
	if max != "0" {
		alts = append(alts, max)
	}
	return "(?:" + strings.Join(alts, "|") + ")"
}

func floatSchema(max float64) map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "number", "minimum": -max, "maximum": max},
		map[string]any{"enum": []any{"NaN", "Infinity", "-Infinity"}},
	}}
}

func (g *schemaGen) bytes() map[string]any {
	return g.pattern(map[string]any{"type": "string", "contentEncoding": "base64", "pattern": bytesPattern})
}

// isWellKnown reports whether name has a JSON form of its own.
func isWellKnown(name protoreflect.FullName) bool {
	switch name {
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.Struct", "google.protobuf.Value",
		"google.protobuf.ListValue", "google.protobuf.FieldMask", "google.protobuf.Any",
		"google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		return true
	}
	return false
}

// wellKnown is the schema of a well-known type's JSON form, or nil.
func (g *schemaGen) wellKnown(md protoreflect.MessageDescriptor) map[string]any {
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		return g.def(defTimestamp)
	case "google.protobuf.Duration":
		return g.def(defDuration)
	case "google.protobuf.Struct":
		return map[string]any{"type": "object"}
	case "google.protobuf.Value":
		return map[string]any{}
	case "google.protobuf.ListValue":
		return map[string]any{"type": "array"}
	case "google.protobuf.FieldMask":
		return g.pattern(map[string]any{"type": "string", "pattern": fieldMaskPattern, "description": "field paths in lowerCamelCase, comma-separated, as name,address.city"})
	case "google.protobuf.Any":
		// Empty, or naming its type.
		return map[string]any{"type": "object", "properties": map[string]any{"@type": map[string]any{"type": "string"}},
			"if": map[string]any{"minProperties": 1}, "then": map[string]any{"required": []string{"@type"}},
			"description": "a message of the type @type names (type.googleapis.com/<full name>), with that type's fields beside @type"}
	case "google.protobuf.DoubleValue":
		return floatSchema(math.MaxFloat64)
	case "google.protobuf.FloatValue":
		return floatSchema(math.MaxFloat32)
	case "google.protobuf.Int64Value":
		return g.def(defInt64)
	case "google.protobuf.UInt64Value":
		return g.def(defUint64)
	case "google.protobuf.Int32Value":
		return map[string]any{"type": "integer", "minimum": math.MinInt32, "maximum": math.MaxInt32}
	case "google.protobuf.UInt32Value":
		return map[string]any{"type": "integer", "minimum": 0, "maximum": math.MaxUint32}
	case "google.protobuf.BoolValue":
		return map[string]any{"type": "boolean"}
	case "google.protobuf.StringValue":
		return map[string]any{"type": "string"}
	case "google.protobuf.BytesValue":
		return g.bytes()
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
