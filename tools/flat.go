package tools

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/toolwire/toolwire/internal/jsonkeys"
)

// flatSchema checks JSON text against the commonest kind of schema, an
// object of scalar properties (what Typed infers from a struct of strings,
// numbers and booleans), by scanning the text once, without decoding it
// into maps. It only ever accepts: text it is not sure about (a violation,
// escapes where lengths or enums matter, fractions, duplicate keys, deep
// nesting) is left to the full validator, which explains what is wrong. So
// a flat schema changes how fast valid text is accepted, never what is
// accepted; FuzzFlatSchema holds it to that.
type flatSchema struct {
	props    map[string]int // property name → index into p
	p        []flatProp
	required uint64 // bit i: p[i] is required
	closed   bool   // additionalProperties: false
}

// flatProp is one property's schema.
type flatProp struct {
	anything       bool  // no constraint: any JSON value
	types          uint8 // kinds allowed (kind* bits)
	minLen, maxLen int   // in characters; -1 when not set
	min, max       int64 // inclusive bounds; used when hasMin, hasMax
	hasMin, hasMax bool
	enum           []string // allowed strings, when set
}

const (
	kindString = 1 << iota
	kindInteger
	kindNumber
	kindBoolean
	kindNull
)

var kindNames = map[string]uint8{
	"string": kindString, "integer": kindInteger, "number": kindNumber, "boolean": kindBoolean, "null": kindNull,
}

// annotations are keywords that never affect validation.
var annotations = map[string]bool{
	"title": true, "description": true, "$comment": true, "examples": true, "default": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
}

// flatDrafts are the $schema values under which the keywords a flat schema
// uses mean what they mean in draft 2020-12, compileSchema's default.
var flatDrafts = map[string]bool{
	"https://json-schema.org/draft/2020-12/schema": true,
	"https://json-schema.org/draft/2019-09/schema": true,
	"http://json-schema.org/draft-07/schema#":      true,
	"http://json-schema.org/draft-07/schema":       true,
}

// maxExact bounds the integers a flat schema compares: below it, every
// integer is exact in a float64, as the full validator would see it.
const maxExact = 1e15

// compileFlat returns schema as a flat schema, or nil when it uses anything
// a flat schema does not model.
func compileFlat(schema json.RawMessage) *flatSchema {
	var root map[string]any
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	if d.Decode(&root) != nil || d.More() {
		return nil
	}
	f := &flatSchema{props: map[string]int{}}
	var required []any
	for k, v := range root {
		switch {
		case annotations[k]:
		case k == "$schema":
			if s, ok := v.(string); !ok || !flatDrafts[s] {
				return nil
			}
		case k == "type":
			if v != "object" {
				return nil
			}
		case k == "additionalProperties":
			switch v := v.(type) {
			case bool:
				f.closed = !v
			case map[string]any:
				if len(v) != 0 {
					return nil
				}
			default:
				return nil
			}
		case k == "required":
			var ok bool
			if required, ok = v.([]any); !ok {
				return nil
			}
		case k == "properties":
			props, ok := v.(map[string]any)
			if !ok || len(props) > 64 {
				return nil
			}
			for name, ps := range props {
				p, ok := compileFlatProp(ps)
				if !ok {
					return nil
				}
				f.props[name] = len(f.p)
				f.p = append(f.p, p)
			}
		default:
			return nil
		}
	}
	if root["type"] != "object" {
		return nil
	}
	for _, r := range required {
		name, ok := r.(string)
		if !ok {
			return nil
		}
		i, ok := f.props[name]
		if !ok {
			return nil
		}
		f.required |= 1 << i
	}
	return f
}

func compileFlatProp(schema any) (flatProp, bool) {
	p := flatProp{minLen: -1, maxLen: -1}
	switch s := schema.(type) {
	case bool:
		p.anything = true
		return p, s
	case map[string]any:
		if len(s) == 0 {
			p.anything = true
			return p, true
		}
		typed := false
		for k, v := range s {
			switch {
			case annotations[k]:
			case k == "type":
				typed = true
				switch v := v.(type) {
				case string:
					p.types = kindNames[v]
					if p.types == 0 {
						return p, false
					}
				case []any:
					for _, t := range v {
						name, _ := t.(string)
						kind := kindNames[name]
						if kind == 0 {
							return p, false
						}
						p.types |= kind
					}
				default:
					return p, false
				}
			case k == "minLength", k == "maxLength":
				n, ok := flatInt(v)
				if !ok || n < 0 {
					return p, false
				}
				if k == "minLength" {
					p.minLen = int(n)
				} else {
					p.maxLen = int(n)
				}
			case k == "minimum", k == "exclusiveMinimum":
				n, ok := flatInt(v)
				if !ok {
					return p, false
				}
				if k == "exclusiveMinimum" {
					n++
				}
				if !p.hasMin || n > p.min {
					p.min, p.hasMin = n, true
				}
			case k == "maximum", k == "exclusiveMaximum":
				n, ok := flatInt(v)
				if !ok {
					return p, false
				}
				if k == "exclusiveMaximum" {
					n--
				}
				if !p.hasMax || n < p.max {
					p.max, p.hasMax = n, true
				}
			case k == "enum":
				vals, ok := v.([]any)
				if !ok || len(vals) == 0 {
					return p, false
				}
				for _, e := range vals {
					s, ok := e.(string)
					if !ok {
						return p, false
					}
					p.enum = append(p.enum, s)
				}
			default:
				return p, false
			}
		}
		if !typed && p.enum != nil {
			typed, p.types = true, kindString // only a string can equal one of them
		}
		p.anything = !typed && p.minLen < 0 && p.maxLen < 0 && !p.hasMin && !p.hasMax
		// A keyword without a type applies to its own kind of value only,
		// which a flat property does not model.
		return p, typed && p.types != 0 || p.anything
	}
	return p, false
}

// flatInt reads a schema's number that is an integer of magnitude below
// maxExact.
func flatInt(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || math.Abs(float64(i)) >= maxExact {
		return 0, false
	}
	return i, true
}

// valid reports whether text, JSON text with no space around it, is an
// object the schema surely accepts.
func (f *flatSchema) valid(text string) bool {
	i := 0
	if i >= len(text) || text[i] != '{' {
		return false
	}
	i = jsonkeys.SkipSpace(text, i+1)
	var seen uint64
	if i < len(text) && text[i] == '}' {
		return f.required == 0 && i+1 == len(text)
	}
	for {
		if i >= len(text) || text[i] != '"' {
			return false
		}
		end, plain, ok := scanString(text, i)
		if !ok || !plain {
			return false // a key with escapes: left to the full validator
		}
		key := text[i+1 : end-1]
		i = jsonkeys.SkipSpace(text, end)
		if i >= len(text) || text[i] != ':' {
			return false
		}
		i = jsonkeys.SkipSpace(text, i+1)
		idx, known := f.props[key]
		switch {
		case known:
			if seen&(1<<idx) != 0 {
				return false // a duplicate: which one counts is the decoder's business
			}
			seen |= 1 << idx
			if i, ok = f.p[idx].check(text, i); !ok {
				return false
			}
		default:
			// Not a property: refused by a closed schema, and left to
			// the full validator by an open one, which also looks for a
			// name repeated but for case (keys.go).
			return false
		}
		i = jsonkeys.SkipSpace(text, i)
		if i >= len(text) {
			return false
		}
		switch text[i] {
		case ',':
			i = jsonkeys.SkipSpace(text, i+1)
		case '}':
			return i+1 == len(text) && seen&f.required == f.required
		default:
			return false
		}
	}
}

// check scans the value at text[i:] and reports where it ends and whether
// the property surely accepts it.
func (p *flatProp) check(text string, i int) (int, bool) {
	if p.anything {
		return skipValue(text, i, 0)
	}
	if i >= len(text) {
		return i, false
	}
	switch c := text[i]; {
	case c == '"':
		end, plain, ok := scanString(text, i)
		if !ok || p.types&kindString == 0 {
			return end, false
		}
		if p.minLen < 0 && p.maxLen < 0 && p.enum == nil {
			return end, true
		}
		if !plain {
			return end, false // escapes or non-ASCII: lengths need decoding
		}
		s := text[i+1 : end-1]
		if (p.minLen >= 0 && len(s) < p.minLen) || (p.maxLen >= 0 && len(s) > p.maxLen) {
			return end, false
		}
		if p.enum != nil {
			for _, e := range p.enum {
				if s == e {
					return end, true
				}
			}
			return end, false
		}
		return end, true
	case c == '-' || ('0' <= c && c <= '9'):
		end, n, isInt := scanNumber(text, i)
		if !isInt || p.types&(kindInteger|kindNumber) == 0 || p.enum != nil {
			return end, false
		}
		if (p.hasMin && n < p.min) || (p.hasMax && n > p.max) {
			return end, false
		}
		return end, true
	case c == 't' || c == 'f':
		end, ok := skipLiteral(text, i)
		return end, ok && p.types&kindBoolean != 0 && p.enum == nil
	case c == 'n':
		end, ok := skipLiteral(text, i)
		return end, ok && p.types&kindNull != 0 && p.enum == nil
	}
	return i, false // an object or array, which a flat property never allows
}

// scanString scans the string starting at text[i] == '"' and returns the
// index past its closing quote; plain is false when it holds escapes or
// bytes outside ASCII.
func scanString(text string, i int) (end int, plain, ok bool) {
	plain = true
	for i++; i < len(text); i++ {
		switch c := text[i]; {
		case c == '"':
			return i + 1, plain, true
		case c < 0x20:
			return i, false, false
		case c >= 0x80:
			plain = false
		case c == '\\':
			plain = false
			if i+1 >= len(text) {
				return i, false, false
			}
			i++
			switch text[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(text) {
					return i, false, false
				}
				for _, h := range []byte(text[i+1 : i+5]) {
					if !isHex(h) {
						return i, false, false
					}
				}
				i += 4
			default:
				return i, false, false
			}
		}
	}
	return i, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber scans the JSON number at text[i:]. isInt is true when it is an
// integer of magnitude below maxExact written without fraction or exponent,
// n its value; for anything else, or text that is no number, it is false.
func scanNumber(text string, i int) (end int, n int64, isInt bool) {
	neg := text[i] == '-'
	if neg {
		i++
	}
	digits := i
	switch {
	case i < len(text) && text[i] == '0':
		i++
	case i < len(text) && '1' <= text[i] && text[i] <= '9':
		for i < len(text) && '0' <= text[i] && text[i] <= '9' {
			i++
		}
	default:
		return i, 0, false
	}
	if i < len(text) && (text[i] == '.' || text[i] == 'e' || text[i] == 'E') {
		return i, 0, false // a fraction or exponent: left to the full validator
	}
	if i-digits > 15 {
		return i, 0, false // maxExact or more
	}
	for _, c := range []byte(text[digits:i]) {
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return i, n, true
}

// skipLiteral scans true, false or null at text[i:].
func skipLiteral(text string, i int) (int, bool) {
	for _, lit := range []string{"true", "false", "null"} {
		if len(text)-i >= len(lit) && text[i:i+len(lit)] == lit {
			return i + len(lit), true
		}
	}
	return i, false
}

// maxFlatDepth bounds the nesting skipValue follows; deeper values are left
// to the full validator.
const maxFlatDepth = 32

// skipValue scans any JSON value at text[i:] and reports where it ends and
// whether it is valid JSON.
func skipValue(text string, i, depth int) (int, bool) {
	if i >= len(text) || depth > maxFlatDepth {
		return i, false
	}
	switch c := text[i]; {
	case c == '"':
		end, _, ok := scanString(text, i)
		return end, ok
	case c == '-' || ('0' <= c && c <= '9'):
		end, _, isInt := scanNumber(text, i)
		return end, isInt // fractions are left to the full validator
	case c == 't' || c == 'f' || c == 'n':
		return skipLiteral(text, i)
	case c == '[':
		i = jsonkeys.SkipSpace(text, i+1)
		if i < len(text) && text[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = skipValue(text, i, depth+1); !ok {
				return i, false
			}
			i = jsonkeys.SkipSpace(text, i)
			if i >= len(text) {
				return i, false
			}
			switch text[i] {
			case ',':
				i = jsonkeys.SkipSpace(text, i+1)
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '{':
		i = jsonkeys.SkipSpace(text, i+1)
		if i < len(text) && text[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(text) || text[i] != '"' {
				return i, false
			}
			end, _, ok := scanString(text, i)
			if !ok {
				return end, false
			}
			i = jsonkeys.SkipSpace(text, end)
			if i >= len(text) || text[i] != ':' {
				return i, false
			}
			if i, ok = skipValue(text, jsonkeys.SkipSpace(text, i+1), depth+1); !ok {
				return i, false
			}
			i = jsonkeys.SkipSpace(text, i)
			if i >= len(text) {
				return i, false
			}
			switch text[i] {
			case ',':
				i = jsonkeys.SkipSpace(text, i+1)
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	}
	return i, false
}
