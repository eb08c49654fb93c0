package tools

import (
	"fmt"
	"reflect"
	"regexp"
)

// A schema may check one part of a value against several subschemas that
// all descend into the same part below it: a tagged union whose variants
// each hold the same recursive property, or an anyOf of two such objects.
// The validator checks each variant in full, so the parts below are
// checked twice per level, and a value nesting d levels deep costs 2^d
// checks: a valid 16-level expression tree took 0.24 s against a
// recursive oneOf of two variants, an invalid one 0.9–1.5 s, each level
// doubling it (30 levels: hours), on every call. MaxSchemaChecks bounds
// the checks in place; what multiplies here is the descent, so it depends
// on the value, and only a walk of the value can tell.
//
// For a schema that may multiply (mayMultiply), each value is walked
// before it is validated, counting the subschemas each part would be
// checked against if every branch were followed (what the validator does
// when branches fail); a value past MaxValueChecks plus
// ValueChecksPerPart for each of its parts is refused without being
// validated. A schema that cannot multiply checks each part against at
// most MaxSchemaChecks subschemas, and is not walked.

// MaxValueChecks and ValueChecksPerPart bound the subschemas a value is
// checked against under a schema that may multiply: the validator spends
// one to two microseconds on each, so the bound is about a third of a second
// plus what the value's size alone would cost.
const (
	MaxValueChecks     = 200_000
	ValueChecksPerPart = 64
)

// costNode is a subschema as the walk sees it: what applies in place, and
// what applies to the parts below.
type costNode struct {
	inPlace       []*costNode // $ref, allOf, anyOf, oneOf, not, if/then/else, dependentSchemas
	props         map[string]*costNode
	patterns      []costPattern
	additional    *costNode // additionalProperties
	unevalProps   *costNode // unevaluatedProperties (counted for every property: an upper bound)
	propertyNames *costNode
	prefix        []*costNode // prefixItems, or draft-07's items array
	items         *costNode   // items, or additionalItems after an items array
	contains      *costNode
	unevalItems   *costNode
}

type costPattern struct {
	re   *regexp.Regexp // nil when Go cannot compile it: counted as matching
	node *costNode
}

// leafNode stands for a boolean schema, or a $ref the walk cannot follow.
var leafNode = &costNode{}

// costGraph builds the walk's graph of doc's root schema, or returns nil
// when no part of a value can meet two subschemas that descend into the
// same part below it (mayMultiply).
func costGraph(doc any) *costNode {
	b := costBuilder{doc: doc, nodes: map[uintptr]*costNode{}}
	root := b.node(doc)
	if !b.mayMultiply(root) {
		return nil
	}
	return root
}

type costBuilder struct {
	doc   any
	nodes map[uintptr]*costNode
}

func (b *costBuilder) node(v any) *costNode {
	m, ok := v.(map[string]any)
	if !ok {
		return leafNode
	}
	key := reflect.ValueOf(m).Pointer()
	if n, ok := b.nodes[key]; ok {
		return n
	}
	n := &costNode{}
	b.nodes[key] = n
	list := func(v any) []*costNode {
		l, _ := v.([]any)
		out := make([]*costNode, 0, len(l))
		for _, s := range l {
			out = append(out, b.node(s))
		}
		return out
	}
	for k, sub := range m {
		switch k {
		case "$ref", "$dynamicRef":
			if ref, ok := sub.(string); ok {
				if target, ok := pointTo(b.doc, ref); ok {
					n.inPlace = append(n.inPlace, b.node(target))
				}
			}
		case "allOf", "anyOf", "oneOf":
			n.inPlace = append(n.inPlace, list(sub)...)
		case "not", "if", "then", "else":
			n.inPlace = append(n.inPlace, b.node(sub))
		case "dependentSchemas", "dependencies":
			if named, ok := sub.(map[string]any); ok {
				for _, s := range named {
					if _, ok := s.(map[string]any); ok {
						n.inPlace = append(n.inPlace, b.node(s))
					}
				}
			}
		case "properties":
			if named, ok := sub.(map[string]any); ok {
				n.props = make(map[string]*costNode, len(named))
				for name, s := range named {
					n.props[name] = b.node(s)
				}
			}
		case "patternProperties":
			if named, ok := sub.(map[string]any); ok {
				for p, s := range named {
					re, _ := regexp.Compile(p)
					n.patterns = append(n.patterns, costPattern{re: re, node: b.node(s)})
				}
			}
		case "additionalProperties":
			n.additional = b.node(sub)
		case "unevaluatedProperties":
			n.unevalProps = b.node(sub)
		case "propertyNames":
			n.propertyNames = b.node(sub)
		case "prefixItems":
			n.prefix = list(sub)
		case "items":
			if _, ok := sub.([]any); ok {
				n.prefix = list(sub)
			} else if n.items == nil {
				n.items = b.node(sub)
			}
		case "additionalItems":
			if _, ok := m["items"].([]any); ok {
				n.items = b.node(sub)
			}
		case "contains":
			n.contains = b.node(sub)
		case "unevaluatedItems":
			n.unevalItems = b.node(sub)
		}
	}
	return n
}

// descents is the most subschemas of n alone that one property or item
// below it may be checked against.
func (n *costNode) descents() int {
	one := func(ok bool) int {
		if ok {
			return 1
		}
		return 0
	}
	obj := one(n.props != nil || n.additional != nil) + len(n.patterns) + one(n.unevalProps != nil)
	arr := one(n.prefix != nil || n.items != nil) + one(n.contains != nil) + one(n.unevalItems != nil)
	return max(obj, arr)
}

// mayMultiply reports whether some subschema reachable from root, with
// what applies in place under it, may check one part below it against
// more than one subschema.
func (b *costBuilder) mayMultiply(root *costNode) bool {
	memo := map[*costNode]int{}
	const busy = -1
	var sum func(n *costNode) int // the descents of n and all in place under it
	sum = func(n *costNode) int {
		switch d, seen := memo[n]; {
		case seen && d == busy:
			return 0 // a cycle in place, which the validator refuses
		case seen:
			return d
		}
		memo[n] = busy
		d := n.descents()
		for _, c := range n.inPlace {
			d = min(d+sum(c), 2)
		}
		memo[n] = d
		return d
	}
	for _, n := range b.nodes {
		if sum(n) >= 2 {
			return true
		}
	}
	return false
}

// costWalk counts the subschemas the parts of one value meet.
type costWalk struct {
	checks, parts int
}

func (w *costWalk) over() bool {
	return w.checks > MaxValueChecks+ValueChecksPerPart*w.parts
}

// checkCost returns nil when checking v against root stays within the
// bound (see MaxValueChecks), else why not.
func checkCost(root *costNode, v any, what string) error {
	w := &costWalk{}
	if w.value(v, []*costNode{root}) {
		return nil
	}
	return &ArgumentError{Reason: fmt.Sprintf("%s would take more than %s subschema checks to check against the tool's schema, the most allowed for its size: the schema checks parts of it against several variants that each descend into the parts below, so each level of nesting multiplies the work; send it less deeply nested", what, printer.Sprint(MaxValueChecks+ValueChecksPerPart*w.parts))}
}

// value walks v under the subschemas met, each with what applies in place
// under it; it returns false once past the bound.
func (w *costWalk) value(v any, met []*costNode) bool {
	w.parts++
	var all []*costNode
	for _, n := range met {
		if all = w.expand(n, all); all == nil {
			return false
		}
	}
	switch v := v.(type) {
	case map[string]any:
		var below []*costNode
		for k, child := range v {
			below = below[:0]
			for _, n := range all {
				matched := false
				if s, ok := n.props[k]; ok {
					below, matched = append(below, s), true
				}
				for _, p := range n.patterns {
					if p.re == nil || p.re.MatchString(k) {
						below, matched = append(below, p.node), true
					}
				}
				if !matched && n.additional != nil {
					below = append(below, n.additional)
				}
				if n.unevalProps != nil {
					below = append(below, n.unevalProps)
				}
				if n.propertyNames != nil && !w.value(k, []*costNode{n.propertyNames}) {
					return false
				}
			}
			if len(below) > 0 && !w.value(child, append([]*costNode(nil), below...)) {
				return false
			}
		}
	case []any:
		var below []*costNode
		for i, child := range v {
			below = below[:0]
			for _, n := range all {
				switch {
				case i < len(n.prefix):
					below = append(below, n.prefix[i])
				case n.items != nil:
					below = append(below, n.items)
				}
				if n.contains != nil {
					below = append(below, n.contains)
				}
				if n.unevalItems != nil {
					below = append(below, n.unevalItems)
				}
			}
			if len(below) > 0 && !w.value(child, append([]*costNode(nil), below...)) {
				return false
			}
		}
	}
	return true
}

// expand appends n and what applies in place under it to all, counting
// each; nil once past the bound (an in-place cycle, which the validator
// refuses, ends there too).
func (w *costWalk) expand(n *costNode, all []*costNode) []*costNode {
	w.checks++
	if w.over() {
		return nil
	}
	all = append(all, n)
	for _, c := range n.inPlace {
		if all = w.expand(c, all); all == nil {
			return nil
		}
	}
	return all
}
