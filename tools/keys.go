package tools

import (
	"encoding/json"
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

// maxKeyDepth bounds the nesting repeatedKey looks into; encoding/json
// refuses deeper documents anyway.
const maxKeyDepth = 10_000

// keyScan looks for a repeated member name in JSON text.
type keyScan struct {
	text      string
	caseNames map[string]bool // names the schema declares in several cases
	first     string          // the name repeated
	second    string          // its repetition
}

// repeatedKey returns a member name of an object in text that repeats
// another of the same object, exactly or (unless caseNames holds both) but
// for case, and the one it repeats; ok is false when there is
// none, and when text is not JSON (the decoder says why).
func repeatedKey(text string, caseNames map[string]bool) (first, second string, ok bool) {
	s := keyScan{text: text, caseNames: caseNames}
	s.value(skipSpace(text, 0), 0)
	return s.first, s.second, s.second != ""
}

// value scans the value at text[i] and returns the index past it; -1 when
// the text is not JSON or a repetition was found.
func (s *keyScan) value(i, depth int) int {
	if i >= len(s.text) || depth > maxKeyDepth {
		return -1
	}
	switch s.text[i] {
	case '{':
		return s.object(i, depth)
	case '[':
		i = skipSpace(s.text, i+1)
		if i < len(s.text) && s.text[i] == ']' {
			return i + 1
		}
		for {
			if i = s.value(i, depth+1); i < 0 {
				return -1
			}
			i = skipSpace(s.text, i)
			if i >= len(s.text) {
				return -1
			}
			switch s.text[i] {
			case ',':
				i = skipSpace(s.text, i+1)
			case ']':
				return i + 1
			default:
				return -1
			}
		}
	case '"':
		end, _, ok := scanString(s.text, i)
		if !ok {
			return -1
		}
		return end
	}
	for i < len(s.text) { // a number or a literal: the decoder checks it
		switch s.text[i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// object scans the object at text[i] == '{'.
func (s *keyScan) object(i, depth int) int {
	var names []string // in a small object, compared in turn
	var folded map[string][]string
	i = skipSpace(s.text, i+1)
	if i < len(s.text) && s.text[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(s.text) || s.text[i] != '"' {
			return -1
		}
		end, plain, ok := scanString(s.text, i)
		if !ok {
			return -1
		}
		name := s.text[i+1 : end-1]
		if !plain && json.Unmarshal([]byte(s.text[i:end]), &name) != nil {
			return -1
		}
		if prev, ok := s.seen(&names, &folded, name); ok {
			s.first, s.second = prev, name
			return -1
		}
		i = skipSpace(s.text, end)
		if i >= len(s.text) || s.text[i] != ':' {
			return -1
		}
		if i = s.value(skipSpace(s.text, i+1), depth+1); i < 0 {
			return -1
		}
		i = skipSpace(s.text, i)
		if i >= len(s.text) {
			return -1
		}
		switch s.text[i] {
		case ',':
			i = skipSpace(s.text, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// smallObject is how many names an object's scan compares in turn before
// it keeps them in a map.
const smallObject = 16

// seen notes name among an object's names and returns the earlier name it
// repeats, if any.
func (s *keyScan) seen(names *[]string, folded *map[string][]string, name string) (string, bool) {
	if *folded == nil {
		for _, prev := range *names {
			if s.clash(prev, name) {
				return prev, true
			}
		}
		if *names = append(*names, name); len(*names) <= smallObject {
			return "", false
		}
		*folded = make(map[string][]string, 2*smallObject)
		for _, n := range *names {
			lower := strings.ToLower(n)
			(*folded)[lower] = append((*folded)[lower], n)
		}
		return "", false
	}
	lower := strings.ToLower(name)
	for _, prev := range (*folded)[lower] {
		if s.clash(prev, name) {
			return prev, true
		}
	}
	(*folded)[lower] = append((*folded)[lower], name)
	return "", false
}

// clash reports whether two names of one object repeat each other: the
// same, or the same but for case unless the schema declares both.
func (s *keyScan) clash(a, b string) bool {
	return a == b || strings.EqualFold(a, b) && !(s.caseNames[a] && s.caseNames[b])
}

// caseNames returns the property names schema (a JSON Schema, decoded)
// declares in more than one case, anywhere in it (each spelling); nil when
// none.
func caseNames(schema any) map[string]bool {
	spellings := map[string]string{}
	var out map[string]bool
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
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
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(schema)
	return out
}
