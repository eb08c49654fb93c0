package openapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	httpsource "github.com/toolwire/toolwire/sources/httpsource"
)

// Parameters are written as OpenAPI 3.1 defines each style (its table of
// style examples is the test): RFC 6570's simple, label, matrix and form
// expansions, spaceDelimited and pipeDelimited arrays and objects, and
// deepObject. Values are escaped for where they stand (PathEscape in the
// path, url.QueryEscape in the query, allowReserved keeping RFC 3986's
// reserved characters); the delimiters a style adds are not escaped.
// Nested values (an object inside an array, say) have no form in any
// style but deepObject, which writes them in brackets at any depth, as
// Stripe reads them (card[address][city]=…, items[0][price]=…).

// styles are the styles each place allows.
var styles = map[string][]string{
	"path":   {"simple", "label", "matrix"},
	"query":  {"form", "spaceDelimited", "pipeDelimited", "deepObject"},
	"header": {"simple"},
	"cookie": {"form"},
}

// checkStyle is why p cannot be sent, or nil: a style its place does not
// allow, or one that cannot carry the values its schema describes.
func (d *document) checkStyle(p paramSpec) error {
	if p.asJSON {
		return nil
	}
	if !slices.Contains(styles[p.in], p.style) {
		return skip(reasonStyle, "parameter %q: style %q is not one a %s parameter can have (%s)", p.name, p.style, p.in, strings.Join(styles[p.in], ", "))
	}
	switch p.style {
	case "deepObject":
		if !p.explode {
			return skip(reasonStyle, "parameter %q: style deepObject with explode false has no defined form", p.name)
		}
		return nil
	case "spaceDelimited", "pipeDelimited":
		if p.explode {
			return skip(reasonStyle, "parameter %q: style %s with explode true has no defined form", p.name, p.style)
		}
	}
	if d.nested(p.schema) {
		return skip(reasonStyle, "parameter %q: its values nest objects or arrays, which style %s cannot carry (only deepObject can)", p.name, p.style)
	}
	return nil
}

// nested reports whether a schema is an array or object whose members are
// arrays or objects, following $refs and allOf (AWS's list items are
// allOf: [{$ref: Tag}, {xml: …}]).
func (d *document) nested(node any) bool {
	budget := maxShapeNodes
	found := false
	d.eachPart(node, &budget, func(s map[string]any) {
		if items, ok := s["items"]; ok && d.compound(items, &budget) {
			found = true
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for _, p := range props {
				if d.compound(p, &budget) {
					found = true
				}
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok && d.compound(ap, &budget) {
			found = true
		}
	})
	return found
}

// maxShapeNodes bounds the schemas nested and compound look at for one
// parameter: allOf members that refer to each other must not make the
// walk exponential.
const maxShapeNodes = 1000

// eachPart calls f with the schema node and, through $refs, each member
// of its allOf, each of which applies to the whole value.
func (d *document) eachPart(node any, budget *int, f func(map[string]any)) {
	s := d.deref(node)
	if s == nil || *budget <= 0 {
		return
	}
	*budget--
	f(s)
	for _, m := range asList(s["allOf"]) {
		d.eachPart(m, budget, f)
	}
}

// compound reports whether a schema's values are arrays or objects: its
// type says so, or, without a type, it has properties or items, a member
// of its allOf is compound, or every alternative of its anyOf or oneOf is.
func (d *document) compound(node any, budget *int) bool {
	s := d.deref(node)
	if s == nil || *budget <= 0 {
		return false
	}
	*budget--
	if t := typeList(s["type"]); len(t) > 0 {
		return slices.Contains(t, "object") || slices.Contains(t, "array")
	}
	if s["properties"] != nil || s["items"] != nil {
		return true
	}
	for _, m := range asList(s["allOf"]) {
		if d.compound(m, budget) {
			return true
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts := asList(s[k]); len(alts) > 0 && !slices.ContainsFunc(alts, func(a any) bool { return !d.compound(a, budget) }) {
			return true
		}
	}
	return false
}

// deref follows a schema's $refs; a reference to nowhere is an empty
// schema.
func (d *document) deref(node any) map[string]any {
	s, _ := node.(map[string]any)
	if ref, ok := s["$ref"].(string); ok {
		v, _, err := d.resolve(ref)
		if err != nil {
			return nil
		}
		s, _ = v.(map[string]any)
	}
	return s
}

// errNested is a value the parameter's style cannot write.
func errNested(name, style string) error {
	return fmt.Errorf("argument %q: style %s cannot carry a nested object or array", name, style)
}

// scalar is a primitive value as text; ok is false for an object or array.
func scalar(v any) (string, bool) {
	switch v.(type) {
	case map[string]any, []any:
		return "", false
	}
	return httpsource.ArgText(v), true
}

// flatten is an array's or object's members as text, an object's as
// name, value pairs in name order; ok is false when a member nests.
func flatten(v any) (parts []string, isObject, ok bool) {
	switch c := v.(type) {
	case []any:
		for _, e := range c {
			s, ok := scalar(e)
			if !ok {
				return nil, false, false
			}
			parts = append(parts, s)
		}
		return parts, false, true
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(c)) {
			s, ok := scalar(c[k])
			if !ok {
				return nil, true, false
			}
			parts = append(parts, k, s)
		}
		return parts, true, true
	}
	s, _ := scalar(v)
	return []string{s}, false, true
}

// pathValue is the text that replaces {name} in the path.
func pathValue(p paramSpec, v any) (string, error) {
	if p.asJSON {
		b, err := json.Marshal(v)
		return httpsource.PathEscape(string(b)), err
	}
	parts, isObject, ok := flatten(v)
	if !ok {
		return "", errNested(p.name, p.style)
	}
	esc := make([]string, len(parts))
	for i, s := range parts {
		esc[i] = httpsource.PathEscape(s)
	}
	name := httpsource.PathEscape(p.name)
	_, isArray := v.([]any)
	switch p.style {
	case "label":
		return "." + join(esc, isObject, p.explode, ".", "="), nil
	case "matrix":
		switch {
		case isObject && p.explode:
			return ";" + join(esc, true, true, ";", "="), nil
		case isArray && p.explode:
			var b strings.Builder
			for _, s := range esc {
				b.WriteString(";" + name + "=" + s)
			}
			return b.String(), nil
		case len(esc) == 1 && esc[0] == "" && !isArray:
			return ";" + name, nil
		}
		return ";" + name + "=" + strings.Join(esc, ","), nil
	}
	return join(esc, isObject, p.explode, ",", "="), nil
}

// join writes a flattened value: an exploded object as name=value pairs
// separated by sep, anything else as its parts separated by commas (sep
// for an exploded array).
func join(parts []string, isObject, explode bool, sep, kv string) string {
	if isObject && explode {
		pairs := make([]string, 0, len(parts)/2)
		for i := 0; i+1 < len(parts); i += 2 {
			pairs = append(pairs, parts[i]+kv+parts[i+1])
		}
		return strings.Join(pairs, sep)
	}
	if explode {
		return strings.Join(parts, sep)
	}
	return strings.Join(parts, ",")
}

// queryEscape escapes a query name or value; allowReserved keeps RFC
// 3986's reserved characters as they are.
func queryEscape(s string, allowReserved bool) string {
	e := url.QueryEscape(s)
	if !allowReserved {
		return e
	}
	return reservedUnescaper.Replace(e)
}

var reservedUnescaper = strings.NewReplacer("%3A", ":", "%2F", "/", "%3F", "?", "%23", "#", "%5B", "[", "%5D", "]", "%40", "@",
	"%21", "!", "%24", "$", "%26", "&", "%27", "'", "%28", "(", "%29", ")", "%2A", "*", "%2B", "+", "%2C", ",", "%3B", ";", "%3D", "=")

// queryPairs are the name=value pairs a query parameter adds.
func queryPairs(p paramSpec, v any) ([]string, error) {
	if p.asJSON {
		b, err := json.Marshal(v)
		return []string{queryEscape(p.name, false) + "=" + queryEscape(string(b), p.allowReserved)}, err
	}
	return formPairs(p.name, v, p.style, p.explode, p.allowReserved, false)
}

// formPairs writes one value in a query or a form body. brackets says
// that objects and nested values with no encoding of their own are
// written in brackets (a form body's property), as deepObject writes
// them.
func formPairs(name string, v any, style string, explode, allowReserved, brackets bool) ([]string, error) {
	esc := func(s string) string { return queryEscape(s, allowReserved) }
	key := queryEscape(name, false)
	if style == "deepObject" {
		return bracketPairs(name, v, allowReserved), nil
	}
	parts, isObject, ok := flatten(v)
	if brackets && style == "form" && explode && (!ok || isObject) {
		return bracketPairs(name, v, allowReserved), nil
	}
	if !ok {
		return nil, errNested(name, style)
	}
	_, isArray := v.([]any)
	if !isArray && !isObject {
		return []string{key + "=" + esc(parts[0])}, nil
	}
	for i := range parts {
		parts[i] = esc(parts[i])
	}
	switch {
	case style == "spaceDelimited":
		return []string{key + "=" + strings.Join(parts, "%20")}, nil
	case style == "pipeDelimited":
		return []string{key + "=" + strings.Join(parts, "%7C")}, nil
	case explode && isObject:
		var out []string
		for i := 0; i+1 < len(parts); i += 2 {
			out = append(out, parts[i]+"="+parts[i+1])
		}
		return out, nil
	case explode:
		out := make([]string, len(parts))
		for i, s := range parts {
			out[i] = key + "=" + s
		}
		return out, nil
	}
	return []string{key + "=" + strings.Join(parts, ",")}, nil
}

// bracketPairs writes a value in brackets at any depth, in name order:
// name[key]=v for an object's members, name[0]=v for an array's
// elements, name=v for a primitive.
func bracketPairs(name string, v any, allowReserved bool) []string {
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch c := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(c)) {
				walk(prefix+"["+k+"]", c[k])
			}
		case []any:
			for i, e := range c {
				walk(fmt.Sprintf("%s[%d]", prefix, i), e)
			}
		default:
			out = append(out, queryEscape(prefix, false)+"="+queryEscape(httpsource.ArgText(c), allowReserved))
		}
	}
	walk(name, v)
	return out
}

// headerValue is a header parameter's value (style simple).
func headerValue(p paramSpec, v any) (string, error) {
	if p.asJSON {
		b, err := json.Marshal(v)
		return string(b), err
	}
	parts, isObject, ok := flatten(v)
	if !ok {
		return "", errNested(p.name, p.style)
	}
	return join(parts, isObject, p.explode, ",", "="), nil
}

// formBody is an application/x-www-form-urlencoded body of the
// arguments' members, each written as its encoding says.
func formBody(members map[string]any, enc map[string]encodingSpec) ([]byte, error) {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(members)) {
		e, ok := enc[k]
		if !ok {
			e = encodingSpec{style: "form", explode: true}
		}
		ps, err := formPairs(k, members[k], e.style, e.explode, e.allowReserved, true)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, ps...)
	}
	return []byte(strings.Join(pairs, "&")), nil
}
