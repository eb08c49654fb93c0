package httpsource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// urlTemplate is a checked URL with placeholders in its path and query.
type urlTemplate struct {
	base  string          // scheme://host, fixed
	path  string          // starts with /
	query []string        // key=value pairs, as written
	used  map[string]bool // fields the path or query use
	// declared are the properties the tool's parameters declare: only
	// they are sent beyond the placeholders (a schema that allows other
	// properties does not make them part of the operation).
	declared map[string]bool
}

// build fills the template from args. extra says whether the arguments no
// placeholder used go to the query string.
func (t *urlTemplate) build(args map[string]any, extra bool) (string, error) {
	var err error
	segs := strings.Split(t.path, "/")
	for i, seg := range segs {
		fields := placeholderRE.FindAllStringSubmatch(seg, -1)
		if fields == nil {
			continue
		}
		segs[i] = placeholderRE.ReplaceAllStringFunc(seg, func(m string) string {
			f := m[1 : len(m)-1]
			v, ok := args[f]
			if !ok || v == nil {
				if err == nil {
					err = fmt.Errorf("argument %q is required: the URL path uses it", f)
				}
				return ""
			}
			return PathEscape(ArgText(v))
		})
		if err != nil {
			return "", err
		}
		if err := CheckSegment(segs[i]); err != nil {
			names := make([]string, len(fields))
			for j, f := range fields {
				names[j] = f[1]
			}
			return "", &ArgumentError{Names: names, Err: err}
		}
	}
	path := strings.Join(segs, "/")
	var q []string
	for _, pair := range t.query {
		key, value, _ := strings.Cut(pair, "=")
		// key={field} with the field absent is left out, so optional
		// parameters need no separate template; an array repeats the key.
		if m := placeholderRE.FindStringSubmatch(value); m != nil && m[0] == value {
			switch v := args[m[1]].(type) {
			case nil:
				continue
			case []any:
				for _, e := range v {
					q = append(q, key+"="+url.QueryEscape(ArgText(e)))
				}
				continue
			}
		}
		q = append(q, placeholderRE.ReplaceAllStringFunc(pair, func(m string) string {
			return url.QueryEscape(ArgText(args[m[1:len(m)-1]]))
		}))
	}
	if extra {
		for _, f := range sortedKeys(args) {
			if t.used[f] || !t.declared[f] {
				continue
			}
			vals := []any{args[f]}
			if a, ok := args[f].([]any); ok {
				vals = a
			}
			for _, v := range vals {
				if v != nil {
					q = append(q, url.QueryEscape(f)+"="+url.QueryEscape(ArgText(v)))
				}
			}
		}
	}
	u := t.base + path
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u, nil
}

// PathEscape escapes one path segment's value; "/" becomes %2F. Escaping
// alone does not keep an argument from climbing the path (RFC 3986 makes
// %2E a "."): CheckSegment the filled segment.
func PathEscape(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// CheckSegment says why a path segment filled from arguments (escaped, as
// it will be sent) must not be sent, or returns nil. An empty segment
// ("/users//x") is one that servers and proxies merge away, reaching
// another resource ("/users/x"). A segment that, percent-decoded, is "."
// or "..", or holds one between slashes or backslashes, climbs the path:
// RFC 3986 makes %2E the same "." (nginx and WHATWG URL parsers remove
// "%2E%2E" segments), and servers that decode %2F or %5C before
// normalizing read "..%2Fadmin" as "../admin". No operation needs such a
// value, so it is refused rather than escaped.
func CheckSegment(seg string) error {
	if seg == "" {
		return errors.New("it leaves an empty segment in the URL path, which servers merge away, reaching another path")
	}
	dec := seg
	// Decoded until it stops changing: a server or proxy may decode twice.
	for range 4 {
		d, err := url.PathUnescape(dec)
		if err != nil || d == dec {
			break
		}
		dec = d
	}
	for _, piece := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
		if strings.Trim(piece, ".") == "" && len(piece) <= 2 {
			return fmt.Errorf("the URL path segment it fills reads %q once decoded, which climbs the path to another resource", dec)
		}
	}
	if strings.Trim(dec, "/\\") == "" {
		return errors.New("it leaves an empty segment in the URL path, which servers merge away, reaching another path")
	}
	return nil
}

// ArgumentError is an error in the arguments: the model can correct it.
// Names are the arguments it concerns.
type ArgumentError struct {
	Names []string
	Err   error
}

func (e *ArgumentError) Error() string {
	q := make([]string, len(e.Names))
	for i, n := range e.Names {
		q[i] = fmt.Sprintf("%q", n)
	}
	s := "argument "
	if len(q) > 1 {
		s = "arguments "
	}
	return s + strings.Join(q, ", ") + ": " + e.Err.Error()
}

func (e *ArgumentError) Unwrap() error { return e.Err }

// InvalidArguments is an error result of kind INVALID_ARGUMENTS saying
// what is wrong with the arguments, so the model fixes them rather than
// retrying.
func InvalidArguments(err error) *tools.Result {
	res := tools.Errorf("%v", err)
	res.ErrorKind = int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS)
	return res
}

// ArgText is how an argument reads inside a URL or a longer string: a
// string as itself, anything else as JSON text.
func ArgText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "true"
		}
		return "false"
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decodeJSON decodes JSON text keeping numbers as written.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

// headerTemplate is one header whose value may name environment variables.
type headerTemplate struct {
	name  string
	value string   // with {{VAR}} references
	vars  []string // the variables referenced
}

// resolve returns the header's value with the environment's values filled
// in. The error names an unset variable and never a value.
func (h headerTemplate) resolve() (string, error) {
	if len(h.vars) == 0 {
		return h.value, nil
	}
	var err error
	v := envRefRE.ReplaceAllStringFunc(h.value, func(m string) string {
		name := m[2 : len(m)-2]
		val, ok := os.LookupEnv(name)
		if !ok && err == nil {
			err = fmt.Errorf("header %s needs the environment variable %s, which is not set on the server", h.name, name)
		}
		return val
	})
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(v, "\r\n\x00") {
		return "", fmt.Errorf("header %s: the environment variables %s hold a line break or NUL, which a header cannot carry", h.name, strings.Join(h.vars, ", "))
	}
	return v, nil
}

// bodyTemplate is a JSON body template: a string that is exactly "{field}"
// becomes the argument's JSON value (an absent argument drops the object
// member, or is null in an array); {field} inside a longer string becomes
// the argument's text.
type bodyTemplate struct {
	doc any
}

func parseBody(raw json.RawMessage, props map[string]json.RawMessage) (*bodyTemplate, error) {
	doc, err := decodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var check func(v any) error
	check = func(v any) error {
		switch v := v.(type) {
		case string:
			_, err := checkFields(v, props)
			return err
		case map[string]any:
			for _, k := range sortedKeys(v) {
				if err := check(v[k]); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range v {
				if err := check(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := check(doc); err != nil {
		return nil, err
	}
	return &bodyTemplate{doc: doc}, nil
}

// fill returns the body for args.
func (b *bodyTemplate) fill(args map[string]any) ([]byte, error) {
	const absent = absentValue(0)
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			if m := placeholderRE.FindStringSubmatch(v); m != nil && m[0] == v {
				a, ok := args[m[1]]
				if !ok {
					return absent
				}
				return a
			}
			return placeholderRE.ReplaceAllStringFunc(v, func(m string) string {
				return ArgText(args[m[1:len(m)-1]])
			})
		case map[string]any:
			out := make(map[string]any, len(v))
			for k, e := range v {
				if f := walk(e); f != absent {
					out[k] = f
				}
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, e := range v {
				if f := walk(e); f != absent {
					out[i] = f
				}
			}
			return out
		}
		return v
	}
	doc := walk(b.doc)
	if doc == absent {
		doc = nil
	}
	return json.Marshal(doc)
}

// absentValue marks a "{field}" whose argument was not given.
type absentValue int
