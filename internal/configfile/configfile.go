// Package configfile reads toolwire's YAML configuration files into the
// Go structs that declare their keys (with JSON tags, as sigs.k8s.io/yaml
// decodes them), strictly, with errors that name the file, line and column
// and speak of keys, lists and mappings rather than Go types or JSON, and
// suggest the key a misspelt one was meant to be. Duration is how the files
// (and the batch files of "toolwire batch") write a time.Duration.
//
// It knows no feature of toolwire, and must import none of toolwire's own
// packages, so that any of them (a feature's Config, a source's spec) may
// import it; cmd/toolwire says which file to read into what.
package configfile

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// Decode decodes the YAML document data, read from file, into v, a
// pointer to a struct whose fields carry JSON tags (so that the same
// structs serve JSON and YAML, as sigs.k8s.io/yaml does). Unknown keys are
// an error. Errors name the file, line and column and speak of keys, lists
// and mappings, not of Go types or JSON.
//
// sigs.k8s.io/yaml converts YAML to JSON before decoding and loses where
// things were, so the document is first parsed into yaml.Node trees and
// checked against v's type, key by key; what passes is then decoded by
// sigs.k8s.io/yaml, strictly, as before.
//
// Two kinds of value are rewritten before sigs.k8s.io/yaml decodes the
// document (rewrite), so that it decodes them as the checker read them:
// a time.Duration, written as a string such as "30s" (the feature Configs
// keep the plain type), becomes the integer encoding/json wants; and an
// unquoted value given for a string becomes exactly the text written:
// `command: on` is "on" and `workspace: 0777` is "0777", as YAML 1.2 (and
// the checker) reads them, where sigs.k8s.io/yaml's YAML 1.1 would make
// them a boolean and a number, and then "true" and "511" or no text at all.
func Decode(file string, data []byte, v any) error {
	var doc yaml.Node
	d := yaml.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&doc); err != nil && err != io.EOF {
		return yamlSyntaxError(file, err)
	}
	// A second document ("---", as Kubernetes manifests are joined) was
	// read by no one: its settings were dropped without a word.
	for {
		var next yaml.Node
		err := d.Decode(&next)
		if err == io.EOF {
			break
		}
		if err != nil {
			return yamlSyntaxError(file, err)
		}
		if len(next.Content) > 0 && next.Content[0].Tag != "!!null" { // a bare "---" at the end is no document
			return fmt.Errorf("%s:%d: a second YAML document (after ---): a config file holds one; merge them", file, next.Content[0].Line)
		}
	}
	if len(doc.Content) > 0 {
		c := &yamlChecker{file: file}
		if err := c.check(doc.Content[0], reflect.TypeOf(v).Elem(), "", nil); err != nil {
			return err
		}
		if len(c.rewrites) > 0 {
			var err error
			if data, err = rewrite(data, c.rewrites); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	if json.Valid(data) {
		// A JSON document the checks left as it is (a generated catalog of
		// thousands of tools): encoding/json reads it as sigs.k8s.io/yaml
		// would, without converting it to YAML and back first.
		d := json.NewDecoder(bytes.NewReader(data))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			return fmt.Errorf("%s: %w", file, err) // the checks above should have caught it
		}
		return nil
	}
	if err := sigsyaml.UnmarshalStrict(data, v); err != nil {
		return fmt.Errorf("%s: %w", file, err) // the checks above should have caught it
	}
	return nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlSyntaxError puts the file name where yaml.v3's errors have "yaml:".
func yamlSyntaxError(file string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s:%s: %s", file, m[1], msg[len(m[0]):])
	}
	return fmt.Errorf("%s: %s", file, strings.TrimPrefix(msg, "yaml: "))
}

// yamlChecker checks a YAML tree against the Go type it will be decoded
// into.
type yamlChecker struct {
	file     string
	rewrites []rewriteAt // the values sigs.k8s.io/yaml is to read otherwise
}

// rewriteAt is a value to rewrite, at path in the document: mapping keys
// as written there (string) and list indices (int).
type rewriteAt struct {
	path []any
	to   func(v any) (any, bool) // the new value of v, and whether it differs
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// check checks n against t; key is n's path in the document ("http_tools[0].url"),
// for messages, and path the same as rewrite walks it.
func (c *yamlChecker) check(n *yaml.Node, t reflect.Type, key string, path []any) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Tag == "!!null" {
		return nil // leaves the zero value, as in JSON
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		var d Duration
		if err := c.decodeLeaf(n, &d, key); err != nil {
			return err
		}
		c.rewrites = append(c.rewrites, rewriteAt{slices.Clone(path), func(any) (any, bool) { return int64(d), true }})
		return nil
	}
	if t.Kind() == reflect.String && n.Kind == yaml.ScalarNode && n.Style == 0 && !reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		text := n.Value
		c.rewrites = append(c.rewrites, rewriteAt{slices.Clone(path), func(v any) (any, bool) {
			if s, ok := v.(string); ok && s == text {
				return v, false
			}
			return text, true
		}})
	}
	if t == rawMessageType || t.Kind() == reflect.Interface {
		// A free-form value (a tool's parameters schema, a body
		// template): read as YAML 1.2 too, where sigs.k8s.io/yaml would
		// read enum: [on, off] as [true, false] and a property named y
		// as "true".
		if err := c.decodeLeaf(n, reflect.New(t).Interface(), key); err != nil {
			return err
		}
		if !plainText(n, map[*yaml.Node]bool{}) {
			return nil // JSON's values, quoted text: read alike either way
		}
		if tree, differs, err := yaml12(n); err != nil {
			return c.errorf(n, key, "%v", err)
		} else if differs {
			c.rewrites = append(c.rewrites, rewriteAt{slices.Clone(path), func(any) (any, bool) { return tree, true }})
		}
		return nil
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return c.decodeLeaf(n, reflect.New(t).Interface(), key)
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return c.errorf(n, key, "want a mapping of keys to values, not %s", describe(n))
		}
		fields := jsonFields(t)
		seen := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			name := k.Value
			ft, ok := fields[name]
			if !ok {
				// encoding/json matches keys regardless of case; so does this.
				for f, typ := range fields {
					if strings.EqualFold(f, name) {
						name, ft, ok = f, typ, true
						break
					}
				}
			}
			if !ok {
				return c.errorf(k, "", "unknown key %q%s", joinKey(key, name), suggest(name, fields))
			}
			if first, dup := seen[name]; dup {
				return c.errorf(k, "", "key %q is set twice (first on line %d)", joinKey(key, name), first.Line)
			}
			seen[name] = k
			if err := c.check(v, ft, joinKey(key, name), append(path, k.Value)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return c.errorf(n, key, "want a mapping of keys to values, not %s", describe(n))
		}
		if t.Key().Kind() == reflect.String {
			// Before the values' rewrites, whose paths name keys as written.
			if r, ok := keysAsWritten(n); ok {
				c.rewrites = append(c.rewrites, rewriteAt{slices.Clone(path), r})
			}
		}
		seen := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if first, dup := seen[k.Value]; dup {
				return c.errorf(k, "", "key %q is set twice (first on line %d)", joinKey(key, k.Value), first.Line)
			}
			seen[k.Value] = k
			if err := c.check(n.Content[i+1], t.Elem(), joinKey(key, k.Value), append(path, k.Value)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return c.errorf(n, key, "want a list, not %s", describe(n))
		}
		for i, item := range n.Content {
			if err := c.check(item, t.Elem(), fmt.Sprintf("%s[%d]", key, i), append(path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return c.decodeLeaf(n, reflect.New(t).Interface(), key)
}

// keysAsWritten returns the rewrite of mapping n that names each entry
// by its key as written, when sigs.k8s.io/yaml's YAML 1.1 would name one
// otherwise: a caller `yes:` in auth.permissions was "true", and `007:`
// was "7", while the tokens file (auth.ParseTokens), a list of callers
// and every text value read them as written, so such a caller's
// permissions and groups named no one; and `on:` beside `y:` were one key.
// The mapping is made again from n, each value as YAML 1.1 reads it alone
// (the rewrites of the values follow). false when no key reads otherwise.
func keysAsWritten(n *yaml.Node) (func(any) (any, bool), bool) {
	differs := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Style == 0 {
			var old any
			if yamlv2.Unmarshal([]byte(k.Value), &old) == nil {
				if s, ok := old.(string); !ok || s != k.Value {
					differs = true
				}
			}
		}
	}
	if !differs {
		return nil, false
	}
	return func(v any) (any, bool) {
		m := make(map[any]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			b, err := yaml.Marshal(n.Content[i+1])
			if err != nil {
				return v, false
			}
			var val any
			if err := yamlv2.Unmarshal(b, &val); err != nil {
				return v, false
			}
			m[n.Content[i].Value] = val
		}
		return m, true
	}, true
}

// decodeLeaf decodes n alone into ptr, as the whole document will be
// decoded, and explains a failure in YAML words.
func (c *yamlChecker) decodeLeaf(n *yaml.Node, ptr any, key string) error {
	t := reflect.TypeOf(ptr).Elem()
	// A quoted scalar for a plain string (no unmarshaler of its own that
	// could refuse it) is that string, whatever it holds: nothing to check
	// (and a catalog of thousands of tools in a JSON file holds thousands
	// of them).
	if pt := reflect.PointerTo(t); t.Kind() == reflect.String && n.Kind == yaml.ScalarNode &&
		(n.Style == yaml.DoubleQuotedStyle || n.Style == yaml.SingleQuotedStyle) && !pt.Implements(jsonUnmarshaler) && !pt.Implements(textUnmarshaler) {
		return nil
	}
	// A plain scalar is decoded from its own text, so that sigs.k8s.io/yaml
	// reads it as it will in the whole document (YAML 1.1: yes is true).
	b := []byte(n.Value)
	if n.Kind != yaml.ScalarNode || n.Style != 0 || strings.ContainsAny(n.Value, "\n") {
		var err error
		if b, err = yaml.Marshal(n); err != nil {
			return c.errorf(n, key, "%v", err)
		}
	}
	err := sigsyaml.Unmarshal(b, ptr)
	if err == nil {
		return nil
	}
	if pt := reflect.PointerTo(t); kindWords[t.Kind()] != "" && !pt.Implements(jsonUnmarshaler) && !pt.Implements(textUnmarshaler) {
		want := kindWords[t.Kind()]
		return c.errorf(n, key, "want %s, not %s", want, describe(n))
	}
	// A type's own message (such as Duration's): without the JSON wrapping.
	msg := err.Error()
	if i := strings.LastIndex(msg, "JSON: "); i >= 0 {
		msg = msg[i+len("JSON: "):]
	}
	return c.errorf(n, key, "%s", msg)
}

// kindWords say in YAML's terms what a Go kind wants.
var kindWords = map[reflect.Kind]string{
	reflect.Bool: "true or false", reflect.String: "a string",
	reflect.Int: "an integer", reflect.Int32: "an integer", reflect.Int64: "an integer",
	reflect.Uint: "a whole number of 0 or more", reflect.Uint32: "a whole number of 0 or more", reflect.Uint64: "a whole number of 0 or more",
	reflect.Float32: "a number", reflect.Float64: "a number",
}

// describe says what n is, in YAML's terms.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	return fmt.Sprintf("%q", v)
}

// errorf returns an error at n's line and column, about key when not "".
func (c *yamlChecker) errorf(n *yaml.Node, key, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if key != "" {
		msg = key + ": " + msg
	}
	return fmt.Errorf("%s:%d:%d: %s", c.file, n.Line, n.Column, msg)
}

func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// jsonFields returns the keys a struct type takes, by their JSON names,
// with the keys of embedded structs without a name of their own at the top
// level, as encoding/json has them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			for k, v := range jsonFields(f.Type) {
				fields[k] = v
			}
		case !f.IsExported():
		case name == "":
			fields[f.Name] = f.Type
		default:
			fields[name] = f.Type
		}
	}
	return fields
}

// suggest returns ` (did you mean "x"?)` for the known key closest to
// name, when one is close enough to be a slip of the keyboard.
func suggest(name string, fields map[string]reflect.Type) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	return Suggest(name, keys)
}

// Suggest returns ` (did you mean "KEY"?)` for the one of keys nearest to
// name, a key misspelt, ignoring case, or "" when none is near.
func Suggest(name string, keys []string) string {
	best, bestD := "", 3                      // more edits than this is another word
	keys = slices.Sorted(slices.Values(keys)) // ties go to the same key every time
	for _, k := range keys {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// rewrite returns the YAML document data with the values at the
// rewrites' paths rewritten, or data itself when none changes. The
// document goes through the YAML library sigs.k8s.io/yaml itself decodes
// with (yaml.v2) and back, so every other value reads as it did.
func rewrite(data []byte, rewrites []rewriteAt) ([]byte, error) {
	var doc any
	if err := yamlv2.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	changed := false
	for _, r := range rewrites {
		doc = setAt(doc, r.path, func(v any) any {
			nv, ok := r.to(v)
			changed = changed || ok
			return nv
		})
	}
	if !changed {
		return data, nil
	}
	return yamlv2.Marshal(doc)
}

// setAt returns node with the value at path replaced by to(value).
func setAt(node any, path []any, to func(any) any) any {
	if len(path) == 0 {
		return to(node)
	}
	switch n := node.(type) {
	case map[any]any:
		for k, child := range n {
			if fmt.Sprint(k) == path[0] {
				n[k] = setAt(child, path[1:], to)
			}
		}
	case []any:
		if i, ok := path[0].(int); ok && i < len(n) {
			n[i] = setAt(n[i], path[1:], to)
		}
	}
	return node
}
