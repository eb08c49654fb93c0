// Package jsonkeys finds an object member named twice in JSON text,
// exactly or but for case: JSON parsers differ on which of the two counts
// (the last, the first, an error, or, Go's encoding/json decoding into a
// struct, either spelling of a name), so a reader that checks a value and
// another that acts on it can see two different values. It scans the text
// once, without decoding it, and allocates nothing for objects of up to a
// few dozen plain names.
package jsonkeys

import (
	"encoding/json"
	"strings"
)

// maxDepth bounds the nesting Repeated looks into; encoding/json refuses
// deeper documents anyway.
const maxDepth = 10_000

// Repeated returns a member name of an object in text that repeats an
// earlier one of the same object, exactly or (unless both spellings are in
// declared) but for case, and the one it repeats; ok is false when there
// is none, and when text is not JSON (a decoder says why).
func Repeated(text string, declared map[string]bool) (first, second string, ok bool) {
	s := scan{text: text, declared: declared}
	s.value(SkipSpace(text, 0), 0)
	return s.first, s.second, s.second != ""
}

type scan struct {
	text          string
	declared      map[string]bool
	first, second string
}

// value scans the value at text[i] and returns the index past it; -1 when
// the text is not JSON or a repetition was found.
func (s *scan) value(i, depth int) int {
	if i >= len(s.text) || depth > maxDepth {
		return -1
	}
	switch s.text[i] {
	case '{':
		return s.object(i, depth)
	case '[':
		return s.array(i, depth)
	case '"':
		end, _ := s.str(i)
		return end
	}
	for i < len(s.text) { // a number or a literal: a decoder checks it
		switch s.text[i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

func (s *scan) array(i, depth int) int {
	i = SkipSpace(s.text, i+1)
	if i < len(s.text) && s.text[i] == ']' {
		return i + 1
	}
	for {
		if i = s.value(i, depth+1); i < 0 {
			return -1
		}
		if i = s.next(i, ']'); i <= 0 {
			return -i - 1 // past the closing bracket, or -1
		}
	}
}

// next reads what follows a value in an array or object, closing being
// its closing bracket: the index of the next value or name after a comma,
// or -(the index past closing)-1 at its end, and 0 when it is neither (not
// JSON; nothing follows a comma at index 0). So -next-1 is where the
// array or object ends, or -1.
func (s *scan) next(i int, closing byte) int {
	i = SkipSpace(s.text, i)
	switch {
	case i >= len(s.text):
		return 0
	case s.text[i] == ',':
		return SkipSpace(s.text, i+1)
	case s.text[i] == closing:
		return -(i + 1) - 1
	}
	return 0
}

// smallObject is how many names an object's scan compares in turn, kept
// on the stack, before it keeps them in a map.
const smallObject = 32

// object scans the object at text[i] == '{'.
func (s *scan) object(i, depth int) int {
	var small [smallObject]string
	names := small[:0]
	var folded map[string][]string // past smallObject names, by lower case
	i = SkipSpace(s.text, i+1)
	if i < len(s.text) && s.text[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(s.text) || s.text[i] != '"' {
			return -1
		}
		end, name := s.str(i)
		if end < 0 {
			return -1
		}
		// The name against those before it.
		if folded == nil {
			for _, prev := range names {
				if s.clash(prev, name) {
					s.first, s.second = prev, name
					return -1
				}
			}
			if len(names) < smallObject {
				names = append(names, name)
			} else {
				folded = make(map[string][]string, 2*smallObject)
				for _, n := range append(names, name) {
					lower := strings.ToLower(n)
					folded[lower] = append(folded[lower], n)
				}
			}
		} else {
			lower := strings.ToLower(name)
			for _, prev := range folded[lower] {
				if s.clash(prev, name) {
					s.first, s.second = prev, name
					return -1
				}
			}
			folded[lower] = append(folded[lower], name)
		}
		i = SkipSpace(s.text, end)
		if i >= len(s.text) || s.text[i] != ':' {
			return -1
		}
		if i = s.value(SkipSpace(s.text, i+1), depth+1); i < 0 {
			return -1
		}
		if i = s.next(i, '}'); i <= 0 {
			return -i - 1 // past the closing brace, or -1
		}
	}
}

// clash reports whether two names of one object repeat each other: the
// same, or the same but for case unless both are declared.
func (s *scan) clash(a, b string) bool {
	return a == b || strings.EqualFold(a, b) && !(s.declared[a] && s.declared[b])
}

// str scans the string at text[i] == '"' and returns the index past it
// and its value (decoded when it holds escapes); end is -1 when it is not
// a JSON string.
func (s *scan) str(i int) (end int, value string) {
	escaped := false
	for j := i + 1; j < len(s.text); j++ {
		switch s.text[j] {
		case '"':
			if !escaped {
				return j + 1, s.text[i+1 : j]
			}
			v, ok := unquote(s.text[i : j+1])
			if !ok {
				return -1, ""
			}
			return j + 1, v
		case '\\':
			escaped = true
			j++ // the escaped byte; \u's digits are plain
		}
	}
	return -1, ""
}

// unquote decodes a JSON string with escapes; ok is false when it is not
// one.
func unquote(quoted string) (string, bool) {
	var v string
	err := json.Unmarshal([]byte(quoted), &v)
	return v, err == nil
}

// SkipSpace returns the index of the first byte from text[i] on that is
// not JSON whitespace (space, tab, newline, carriage return).
func SkipSpace(text string, i int) int {
	for i < len(text) {
		switch text[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
