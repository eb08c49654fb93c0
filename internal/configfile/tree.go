package configfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"reflect"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// Tree converts a YAML node into the tree encoding/json decodes JSON
// into with UseNumber: mappings with string keys (a key that is not a
// string, such as a response code, is its text), lists, strings, booleans,
// nil, and numbers as written (json.Number; 0x10 and 0o17 converted, .inf
// and .nan refused naming the line).
//
// It reads YAML 1.2, as the checker does and OpenAPI documents are written:
// sigs.k8s.io/yaml reads YAML 1.1, where y, n, yes, no, on and off are
// booleans, so a schema's enum: [on, off] became [true, false] (and a
// model's "on" did not match), a property named y became "true", and an
// OpenAPI parameter named n became false and was skipped. Anchors and
// aliases are converted once and shared; merge keys (<<) are followed.
//
// Whatever reads the tree reads a shared value once for each alias of
// it, so the document is refused when its aliases expand it past
// maxExpandedValues (879 bytes of aliases of aliases, "billion laughs",
// made serve take 4 GB and counting), or when an alias names a value that
// contains it (which no JSON can be).
func Tree(n *yaml.Node) (any, error) {
	sz := sizer{sizes: map[*yaml.Node]int64{}}
	if total, err := sz.size(n, 0); err != nil {
		return nil, err
	} else if total > maxExpandedValues {
		return nil, fmt.Errorf("its aliases (*name) expand it to more than %d values; write the values out, or use fewer aliases of aliases", maxExpandedValues)
	}
	c := yamlConverter{done: map[*yaml.Node]any{}}
	return c.value(n, 0)
}

// maxExpandedValues bounds the values of a document with its aliases
// expanded: about as many as the largest document read (16 MiB) can hold
// written out as JSON.
const maxExpandedValues = 4 << 20

// sizer counts the values of a document as its readers will meet them,
// each alias as the value it names. Only aliases can name a node twice, and
// only an anchored node can be named, so those alone are remembered.
type sizer struct {
	sizes map[*yaml.Node]int64 // by anchored node: its size, or -1 while it is being counted
}

func (s *sizer) size(n *yaml.Node, depth int) (int64, error) {
	if depth > maxYAMLDepth {
		return 0, fmt.Errorf("line %d: nested more than %d deep", n.Line, maxYAMLDepth)
	}
	if n.Kind == yaml.AliasNode {
		if s.sizes[n.Alias] == -1 {
			return 0, fmt.Errorf("line %d: the alias *%s names a value that contains it", n.Line, n.Value)
		}
		return s.size(n.Alias, depth+1)
	}
	if n.Anchor != "" {
		if v, ok := s.sizes[n]; ok {
			return v, nil
		}
		s.sizes[n] = -1
	}
	total := int64(1)
	for _, c := range n.Content {
		v, err := s.size(c, depth+1)
		if err != nil {
			return 0, err
		}
		total = min(total+v, maxExpandedValues+1) // no overflow, however wide
	}
	if n.Anchor != "" {
		s.sizes[n] = total
	}
	return total, nil
}

// yamlConverter turns yaml.Nodes into the JSON tree. An alias is
// converted once and shared, as a decoder would share it, so a document of
// aliases of aliases costs its size, not their expansion. (Tree has
// refused a document whose alias names a value that contains it.)
type yamlConverter struct {
	done map[*yaml.Node]any // converted anchored mappings and lists, by node
}

// maxYAMLDepth bounds the nesting of a document's collections.
const maxYAMLDepth = 1000

func (c *yamlConverter) value(n *yaml.Node, depth int) (any, error) {
	if depth > maxYAMLDepth {
		return nil, fmt.Errorf("line %d: nested more than %d deep", n.Line, maxYAMLDepth)
	}
	if n.Anchor != "" { // only an anchored value can be named again
		if v, ok := c.done[n]; ok {
			return v, nil
		}
	}
	switch n.Kind {
	case yaml.AliasNode:
		return c.value(n.Alias, depth+1)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0], depth+1)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := c.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		if n.Anchor != "" {
			c.done[n] = list
		}
		return list, nil
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		if err := c.mapping(n, m, depth); err != nil {
			return nil, err
		}
		if n.Anchor != "" {
			c.done[n] = m
		}
		return m, nil
	}
	return yamlScalar(n)
}

// mapping fills m from n's pairs. Merge keys (<<) add the pairs of the
// mappings they name that n does not have.
func (c *yamlConverter) mapping(n *yaml.Node, m map[string]any, depth int) error {
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, val)
			continue
		}
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: a key that is not text, a number or a boolean", k.Line)
		}
		v, err := c.value(val, depth+1)
		if err != nil {
			return err
		}
		m[key] = v
	}
	for _, src := range merged {
		if src.Kind == yaml.AliasNode {
			src = src.Alias
		}
		var sources []*yaml.Node
		switch src.Kind {
		case yaml.MappingNode:
			sources = []*yaml.Node{src}
		case yaml.SequenceNode:
			sources = src.Content
		default:
			return fmt.Errorf("line %d: a merge key (<<) names no mapping", src.Line)
		}
		for _, s := range sources {
			v, err := c.value(s, depth+1)
			if err != nil {
				return err
			}
			from, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("line %d: a merge key (<<) names no mapping", s.Line)
			}
			for k, e := range from {
				if _, ok := m[k]; !ok {
					m[k] = e
				}
			}
		}
	}
	return nil
}

// yamlScalar converts a scalar as YAML 1.2's core schema reads it.
func yamlScalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		err := n.Decode(&b)
		return b, err
	case "!!int", "!!float":
		if isJSONNumber(n.Value) {
			return json.Number(n.Value), nil
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: %s is not a number JSON can hold", n.Line, n.Value)
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return json.Number(strconv.FormatInt(int64(f), 10)), nil // 0x1F, 0o17
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return n.Value, nil // text, and what else a tag names (a date, base64)
}

// isJSONNumber reports whether s is a number as JSON writes one.
func isJSONNumber(s string) bool {
	var n json.Number
	return s != "" && (s[0] == '-' || '0' <= s[0] && s[0] <= '9') && json.Unmarshal([]byte(s), &n) == nil
}

// plainText reports whether n holds a scalar that YAML 1.1 and 1.2 may
// read apart: unquoted text (on, y, 0777, 1:20), or a number not written
// as JSON writes one (0o17, .inf). A subtree of JSON (a generated
// catalog's schemas) holds none, and is not converted twice.
func plainText(n *yaml.Node, seen map[*yaml.Node]bool) bool {
	if seen[n] {
		return false
	}
	seen[n] = true
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return n.Style == 0
		case "!!int", "!!float":
			return !isJSONNumber(n.Value)
		}
		return false
	case yaml.AliasNode:
		return plainText(n.Alias, seen)
	}
	for _, c := range n.Content {
		if plainText(c, seen) {
			return true
		}
	}
	return false
}

// yaml12 returns n as YAML 1.2 reads it, in the Go types yaml.v2 marshals
// as they are (rewrite's), and whether sigs.k8s.io/yaml's YAML 1.1 reads
// it otherwise.
func yaml12(n *yaml.Node) (tree any, differs bool, err error) {
	if tree, err = Tree(n); err != nil {
		return nil, false, err
	}
	text, err := yaml.Marshal(n)
	if err != nil {
		return nil, false, err
	}
	js, err := sigsyaml.YAMLToJSON(text)
	if err != nil {
		return nil, false, err
	}
	var old any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&old); err != nil {
		return nil, false, err
	}
	if reflect.DeepEqual(old, tree) {
		return nil, false, nil
	}
	return native(tree), true, nil
}

// native turns Tree's json.Numbers into int64 or float64, which yaml.v2
// writes as numbers (a json.Number it would write as a string).
func native(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = native(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = native(e)
		}
		return out
	}
	return v
}
