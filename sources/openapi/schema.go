package openapi

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Limits of the input schemas derived from a document's schemas, which
// are written out whole (models read them): a recursive schema (a Node
// whose children are Nodes) is unrolled, and where a limit is reached the
// schema becomes {} (any value), which still validates. Output schemas
// are not unrolled: each schema they reference is one entry of their
// $defs.
const (
	// maxRecursion is how many times a schema may appear inside itself
	// before it is cut: a Node's children are Nodes, their children are
	// cut.
	maxRecursion = 2
	// maxDepth bounds nesting of any kind.
	maxDepth = 16
	// maxNodes bounds the schemas one tool's input schema holds, so a
	// document whose recursive schemas branch widely cannot explode.
	maxNodes = 4000
	// maxCopiedBytes bounds the text one tool's input schema copies from
	// the document (titles, descriptions, formats, patterns, enums,
	// consts and defaults), which each $ref written out copies again: a
	// 94 KB document of 1000 properties naming one schema with a 50 KB
	// description made a 50 MB input schema. Past it a schema is {}, as
	// past maxNodes; DocuSign's widest, 150 KB, copies less than a fifth
	// of it.
	maxCopiedBytes = 1 << 20
	// maxInputBytes bounds an input schema's text, which a model reads
	// with every request: a larger one (Kubernetes' Pod, written out) is
	// made again with nesting cut shallower until it fits, or its
	// nesting is down to minDepth.
	maxInputBytes = 64 << 10
	minDepth      = 3
	// maxOutputBytes bounds an output schema's text: the definitions
	// nearest the response are written out until it is reached.
	maxOutputBytes = 64 << 10
)

// validTypes are JSON Schema's type names; others (Swagger's "file", a
// misspelling) are dropped rather than failing the schema.
var validTypes = map[string]bool{"null": true, "boolean": true, "object": true, "array": true, "number": true, "string": true, "integer": true}

// converter turns a document's schemas into JSON Schema 2020-12 as the
// registry compiles it: OpenAPI 3.0's nullable (beside a type, an enum, a
// oneOf or a $ref) and boolean exclusive bounds become 2020-12's, Swagger's
// x-nullable too; readOnly properties leave request schemas (writeOnly
// ones response schemas); a keyword whose value is of the wrong kind, a
// pattern Go cannot compile, and what has no meaning to a validator (xml,
// examples, discriminator, extensions) are dropped.
//
// A request schema (request) is written out whole: $refs are inlined,
// allOf of object schemas merged into one, recursion unrolled to the
// limits above; a $ref that leads nowhere is an error (err), since the
// tool could not say what it takes. A response schema refers to the
// document's schemas through $defs (out), each converted once per load
// however many tools use it, and a $ref that leads nowhere accepts any
// value there: the output schema only describes what comes back.
type converter struct {
	d        *document
	request  bool
	maxDepth int // request: nesting past it is cut
	nodes    int
	copied   int            // request: bytes of the document's values copied (maxCopiedBytes)
	deepest  int            // request: the deepest depth a schema was converted at
	onPath   map[string]int // request: references being inlined, by pointer
	err      error          // request: the first reference that could not be followed
	out      *defs          // response: the shared definitions
	deps     map[*def]bool  // response: the definitions the schema being converted uses
}

func (d *document) requestConverter(maxDepth int) *converter {
	return &converter{d: d, request: true, maxDepth: maxDepth, onPath: map[string]int{}}
}

// schema converts a schema node; nil is {}.
func (c *converter) schema(node any, depth int) any {
	switch n := node.(type) {
	case bool:
		return n
	case map[string]any:
		return c.object(n, depth)
	}
	return map[string]any{}
}

func (c *converter) object(s map[string]any, depth int) any {
	c.nodes++
	if c.request && (depth > c.maxDepth || c.nodes > maxNodes || c.copied > maxCopiedBytes) {
		return map[string]any{}
	}
	c.deepest = max(c.deepest, depth)
	nullable := s["nullable"] == true || s["x-nullable"] == true
	if ref, ok := s["$ref"].(string); ok {
		return c.ref(ref, s, nullable, depth)
	}
	out := map[string]any{}
	types := typeList(s["type"])
	if nullable && len(types) > 0 && !slices.Contains(types, "null") {
		types = append(types, "null")
	}
	switch len(types) {
	case 0:
	case 1:
		out["type"] = types[0]
	default:
		out["type"] = types
	}
	for _, k := range []string{"title", "description", "format"} {
		if v, ok := s[k].(string); ok && v != "" {
			out[k] = v
		}
	}
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		if nullable && !slices.Contains(enum, any(nil)) {
			enum = append(slices.Clone(enum), nil)
		}
		out["enum"] = enum
	}
	if v, ok := s["const"]; ok {
		out["const"] = v
	}
	if v, ok := s["default"]; ok && c.request {
		out["default"] = v
	}
	if s["deprecated"] == true {
		out["deprecated"] = true
	}
	// Numbers; OpenAPI 3.0's exclusive bounds are flags on minimum and
	// maximum.
	for _, k := range []string{"minimum", "maximum"} {
		if isNumber(s[k]) {
			out[k] = s[k]
		}
	}
	for _, b := range [][2]string{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
		switch v := s[b[0]]; {
		case isNumber(v):
			out[b[0]] = v
		case v == true && isNumber(s[b[1]]):
			out[b[0]] = s[b[1]]
			delete(out, b[1])
		}
	}
	if isNumber(s["multipleOf"]) && positive(s["multipleOf"]) {
		out["multipleOf"] = s["multipleOf"]
	}
	for _, k := range []string{"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains", "maxContains"} {
		if isCount(s[k]) {
			out[k] = s[k]
		}
	}
	// A pattern Go's regexp cannot compile (ECMA lookarounds) is dropped
	// rather than failing the tool: it only narrows what is valid.
	if p, ok := s["pattern"].(string); ok && compiles(p) {
		out["pattern"] = p
	}
	if s["uniqueItems"] == true {
		out["uniqueItems"] = true
	}
	// Arrays. OpenAPI 3.0 and Swagger's tuple form of items is 2020-12's
	// prefixItems.
	switch items := s["items"].(type) {
	case []any:
		out["prefixItems"] = c.list(items, depth)
	case map[string]any, bool:
		out["items"] = c.schema(items, depth+1)
	}
	if items, ok := s["prefixItems"].([]any); ok && len(items) > 0 {
		out["prefixItems"] = c.list(items, depth)
	}
	// OpenAI refuses a tool whose input schema has an array without
	// items ("array schema missing items"), at any depth and in a list of
	// types too: {} says what no items said, any value.
	if c.request && slices.Contains(types, "array") && out["items"] == nil && out["prefixItems"] == nil {
		out["items"] = map[string]any{}
	}
	if v, ok := s["contains"]; ok {
		out["contains"] = c.schema(v, depth+1)
	}
	// Objects.
	if props, ok := s["properties"].(map[string]any); ok && len(props) > 0 {
		conv := make(map[string]any, len(props))
		for _, name := range slices.Sorted(maps.Keys(props)) {
			p := props[name]
			if pm, ok := p.(map[string]any); ok && ((c.request && pm["readOnly"] == true) || (!c.request && pm["writeOnly"] == true)) {
				continue
			}
			conv[name] = c.schema(p, depth+1)
		}
		out["properties"] = conv
		var req []string
		named := map[string]bool{}
		for _, r := range stringList(s["required"]) {
			if _, ok := conv[r]; ok && !named[r] {
				named[r] = true
				req = append(req, r)
			}
		}
		if len(req) > 0 {
			out["required"] = req
		}
	} else if req := stringList(s["required"]); len(req) > 0 {
		out["required"] = slices.Compact(slices.Sorted(slices.Values(req)))
	}
	switch ap := s["additionalProperties"].(type) {
	case bool:
		if !ap {
			out["additionalProperties"] = false
		}
	case map[string]any:
		out["additionalProperties"] = c.schema(ap, depth+1)
	}
	if pp, ok := s["patternProperties"].(map[string]any); ok {
		conv := map[string]any{}
		for _, p := range slices.Sorted(maps.Keys(pp)) {
			if compiles(p) {
				conv[p] = c.schema(pp[p], depth+1)
			}
		}
		if len(conv) > 0 {
			out["patternProperties"] = conv
		}
	}
	if v, ok := s["propertyNames"]; ok {
		out["propertyNames"] = c.schema(v, depth+1)
	}
	if dr, ok := s["dependentRequired"].(map[string]any); ok {
		conv := map[string]any{}
		for k, v := range dr {
			if names := stringList(v); names != nil {
				conv[k] = names
			}
		}
		if len(conv) > 0 {
			out["dependentRequired"] = conv
		}
	}
	if ds, ok := s["dependentSchemas"].(map[string]any); ok {
		conv := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(ds)) {
			conv[k] = c.schema(ds[k], depth+1)
		}
		out["dependentSchemas"] = conv
	}
	for _, k := range []string{"unevaluatedProperties", "unevaluatedItems"} {
		if v, ok := s[k]; ok {
			out[k] = c.schema(v, depth+1)
		}
	}
	// Combinators.
	for _, k := range []string{"oneOf", "anyOf"} {
		if list, ok := s[k].([]any); ok && len(list) > 0 {
			out[k] = c.list(list, depth)
		}
	}
	if list, ok := s["allOf"].([]any); ok && len(list) > 0 {
		if c.request {
			merged, rest := mergeAllOf(out, c.list(list, depth))
			out = merged
			if len(rest) > 0 {
				out["allOf"] = rest
			}
		} else {
			out["allOf"] = c.list(list, depth)
		}
	}
	if v, ok := s["not"]; ok {
		out["not"] = c.schema(v, depth+1)
	}
	for _, k := range []string{"if", "then", "else"} {
		if v, ok := s[k]; ok {
			out[k] = c.schema(v, depth+1)
		}
	}
	// nullable beside no type (a oneOf, say: GitHub's milestone, which
	// null clears) admits null alongside whatever the rest admits.
	if c.request {
		for _, k := range []string{"title", "description", "format", "pattern", "enum", "const", "default"} {
			if v, ok := out[k]; ok {
				c.copied += valueSize(v, maxCopiedBytes-c.copied)
			}
		}
	}
	if nullable && len(types) == 0 && out["enum"] == nil && len(out) > 0 {
		return map[string]any{"anyOf": []any{map[string]any{"type": "null"}, out}}
	}
	return out
}

// ref converts a schema that is a $ref, with what sits beside it: in 3.1
// a $ref's siblings apply with it, in 3.0 they are ignored (nullable
// aside, which documents mean when they write it).
func (c *converter) ref(ref string, s map[string]any, nullable bool, depth int) any {
	var siblings map[string]any
	if c.d.version == openapi31 {
		rest := maps.Clone(s)
		delete(rest, "$ref")
		delete(rest, "nullable")
		if len(rest) > 0 {
			if conv, ok := c.object(rest, depth).(map[string]any); ok && len(conv) > 0 {
				siblings = conv
			}
		}
	}
	var target any
	if c.request {
		target = c.inline(ref, depth)
	} else {
		target = map[string]any{"$ref": "#/$defs/" + c.out.use(ref, c)}
	}
	if len(siblings) > 0 {
		annotations := true
		for k := range siblings {
			if k != "description" && k != "title" && k != "deprecated" {
				annotations = false
			}
		}
		if tm, ok := target.(map[string]any); ok && annotations && c.request {
			target = maps.Clone(tm)
			maps.Copy(target.(map[string]any), siblings)
		} else {
			siblings["allOf"] = append([]any{target}, asList(siblings["allOf"])...)
			target = siblings
		}
	}
	if nullable {
		return map[string]any{"anyOf": []any{map[string]any{"type": "null"}, target}}
	}
	return target
}

// inline is the request schema a $ref names, written out, unrolled to
// maxRecursion copies of itself.
func (c *converter) inline(ref string, depth int) any {
	node, err := c.d.pointer(ref)
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return map[string]any{}
	}
	if c.onPath[ref] >= maxRecursion {
		return map[string]any{}
	}
	c.onPath[ref]++
	defer func() { c.onPath[ref]-- }()
	return c.schema(node, depth+1)
}

func (c *converter) list(refs []any, depth int) []any {
	out := make([]any, 0, len(refs))
	for _, r := range refs {
		out = append(out, c.schema(r, depth+1))
	}
	return out
}

// defs are a document's schemas as response schemas refer to them: each
// converted once, on first use, under a name unique in the load.
type defs struct {
	d     *document
	byRef map[string]*def
	names map[string]bool
	next  map[string]int // by base: the next number to try, so numbering does not start again at 2
}

type def struct {
	name string
	json []byte        // the converted schema
	deps map[*def]bool // the definitions it refers to
}

func newDefs(d *document) *defs {
	return &defs{d: d, byRef: map[string]*def{}, names: map[string]bool{}, next: map[string]int{}}
}

var notDefChar = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// use returns the name of the definition ref names, converting it the
// first time, and records it as a dependency of what c is converting.
func (ds *defs) use(ref string, c *converter) string {
	if df, ok := ds.byRef[ref]; ok {
		c.deps[df] = true
		return df.name
	}
	base := ref[strings.LastIndexByte(ref, '/')+1:]
	base = strings.Trim(notDefChar.ReplaceAllString(strings.ReplaceAll(strings.ReplaceAll(base, "~1", "/"), "~0", "~"), "_"), "_")
	if base == "" {
		base = "schema"
	}
	// Trying every number from 2 again for each schema of a base (a!,
	// a#, … are all "a") made 20,000 of them, a 1.5 MB document, take
	// 38 s of CPU.
	name := base
	for i := max(2, ds.next[base]); ds.names[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
		ds.next[base] = i + 1
	}
	ds.names[name] = true
	df := &def{name: name, deps: map[*def]bool{}}
	ds.byRef[ref] = df
	c.deps[df] = true
	inner := &converter{d: ds.d, out: ds, deps: df.deps}
	var conv any = map[string]any{} // a $ref to nowhere: any value
	if node, err := ds.d.pointer(ref); err == nil {
		conv = inner.schema(node, 0)
	}
	df.json, _ = json.Marshal(conv)
	return name
}

// responseSchema converts a response's schema: the JSON of an object
// schema whose $defs hold the definitions it uses. Definitions are taken
// nearest first (breadth first from the response) while the schema stays
// within maxOutputBytes; those past the bound are {} in $defs (any
// value), so a document whose schemas all refer to each other (Stripe's
// expandable objects) gives each tool a schema of its response's first
// levels rather than of the whole API. ok is false when the response is
// not an object, which an output schema must be.
func (ds *defs) responseSchema(node any) (out json.RawMessage, ok bool) {
	if !ds.isObject(node, 0) {
		return nil, false
	}
	c := &converter{d: ds.d, out: ds, deps: map[*def]bool{}}
	root, isMap := c.schema(node, 0).(map[string]any)
	if !isMap {
		return nil, false
	}
	root["type"] = "object"
	b, err := json.Marshal(root)
	if err != nil || len(b) > maxOutputBytes {
		return nil, false // a response written out past the bound: text only
	}
	if len(c.deps) == 0 {
		return b, true
	}
	byName := func(m map[*def]bool) []*def {
		return slices.SortedFunc(maps.Keys(m), func(a, b *def) int { return strings.Compare(a.name, b.name) })
	}
	size := len(b)
	full := map[*def]bool{}
	named := map[*def]bool{} // every definition a $ref of the schema names
	queue := byName(c.deps)
	for _, df := range queue {
		named[df] = true
	}
	for len(queue) > 0 {
		df := queue[0]
		queue = queue[1:]
		if size+len(df.json) > maxOutputBytes {
			continue
		}
		full[df] = true
		size += len(df.json) + len(df.name) + 4
		for _, dep := range byName(df.deps) {
			if !named[dep] {
				named[dep] = true
				queue = append(queue, dep)
			}
		}
	}
	var buf strings.Builder
	buf.Grow(size + 16*len(named))
	buf.WriteString(`{"$defs":{`)
	for i, df := range byName(named) {
		if i > 0 {
			buf.WriteByte(',')
		}
		name, _ := json.Marshal(df.name)
		buf.Write(name)
		buf.WriteByte(':')
		if full[df] {
			buf.Write(df.json)
		} else {
			buf.WriteString("{}")
		}
	}
	buf.WriteString("}")
	if len(b) > 2 {
		buf.WriteByte(',')
		buf.Write(b[1:])
	} else {
		buf.WriteString("}")
	}
	return json.RawMessage(buf.String()), true
}

// isObject reports whether a response schema is of type object: its own
// type, through its $refs, or an allOf member's.
func (ds *defs) isObject(node any, hops int) bool {
	s, ok := node.(map[string]any)
	if !ok || hops > maxRefHops {
		return false
	}
	if ref, ok := s["$ref"].(string); ok {
		target, err := ds.d.pointer(ref)
		return err == nil && ds.isObject(target, hops+1)
	}
	if s["nullable"] == true || s["x-nullable"] == true {
		return false
	}
	switch t := s["type"].(type) {
	case string:
		return t == "object"
	case []any:
		return len(t) == 1 && t[0] == "object"
	}
	if list, ok := s["allOf"].([]any); ok {
		for _, m := range list {
			if ds.isObject(m, hops+1) {
				return true
			}
		}
	}
	return false
}

// mergeAllOf folds allOf's object schemas into out: their properties and
// required names are unioned (the first definition of a property wins),
// and a keyword out lacks is taken from the first that has it. What cannot
// be merged (an allOf member with its own combinators) stays an allOf.
// out's properties and required names are copied once, at the first
// member that adds to them, and names are looked up in a set: a copy or a
// scan per member or per name made the merge quadratic.
func mergeAllOf(out map[string]any, members []any) (map[string]any, []any) {
	var rest []any
	var props map[string]any // out's properties, copied
	var req []string         // out's required names, copied
	var named map[string]bool
	for _, member := range members {
		m, ok := member.(map[string]any)
		if !ok {
			rest = append(rest, member)
			continue
		}
		if m["oneOf"] != nil || m["anyOf"] != nil || m["allOf"] != nil || m["not"] != nil || m["$ref"] != nil {
			rest = append(rest, m)
			continue
		}
		for k, v := range m {
			switch k {
			case "properties":
				if props == nil {
					old, _ := out["properties"].(map[string]any)
					props = maps.Clone(old)
					if props == nil {
						props = map[string]any{}
					}
				}
				for name, p := range v.(map[string]any) {
					if _, ok := props[name]; !ok {
						props[name] = p
					}
				}
			case "additionalProperties":
				// false in one member would refuse the others' properties.
				if v != false {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
			case "required":
				if named == nil {
					old, _ := out["required"].([]string)
					req, named = slices.Clone(old), map[string]bool{}
					for _, r := range req {
						named[r] = true
					}
				}
				for _, r := range v.([]string) {
					if !named[r] {
						named[r] = true
						req = append(req, r)
					}
				}
			default:
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
	}
	if props != nil {
		out["properties"] = props
	}
	if named != nil {
		out["required"] = req
	}
	return out, rest
}

// valueSize is about the length of v as JSON, counted no further than
// past limit.
func valueSize(v any, limit int) int {
	switch v := v.(type) {
	case string:
		return len(v) + 2
	case json.Number:
		return len(v)
	case []any:
		n := 2
		for _, e := range v {
			if n > limit {
				break
			}
			n += valueSize(e, limit-n) + 1
		}
		return n
	case map[string]any:
		n := 2
		for k, e := range v {
			if n > limit {
				break
			}
			n += len(k) + 4 + valueSize(e, limit-n)
		}
		return n
	}
	return 5 // a boolean, null or another number
}

// typeList is a type keyword's valid type names.
func typeList(v any) []string {
	var out []string
	switch t := v.(type) {
	case string:
		if validTypes[t] {
			out = append(out, t)
		}
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok && validTypes[s] && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// stringList is a list of strings, or nil when v is not one.
func stringList(v any) []string {
	list, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil
		}
		out = append(out, s)
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func isNumber(v any) bool {
	switch v.(type) {
	case json.Number, float64, int, int64:
		return true
	}
	return false
}

func positive(v any) bool {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return err == nil && f > 0
	case float64:
		return n > 0
	case int:
		return n > 0
	case int64:
		return n > 0
	}
	return false
}

// isCount reports whether v is a non-negative integer.
func isCount(v any) bool {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return err == nil && i >= 0
	case float64:
		return n >= 0 && n == float64(int64(n))
	case int:
		return n >= 0
	case int64:
		return n >= 0
	}
	return false
}

func compiles(pattern string) bool {
	_, err := regexp.Compile(pattern)
	return err == nil
}
