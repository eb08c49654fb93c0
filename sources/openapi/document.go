package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolwire/toolwire/internal/follow"
)

const (
	// maxDocumentBytes bounds a document read from a file or a URL.
	maxDocumentBytes = 16 << 20
	// fetchTimeout bounds reading a document from a URL.
	fetchTimeout = 30 * time.Second
	// slowFetch is when a document still being read from a URL is logged.
	slowFetch = 5 * time.Second
	// maxRefHops bounds a chain of $refs that point at $refs.
	maxRefHops = 32
)

// read returns the document spec names: a file, or the body of a GET of
// an http(s) URL.
func read(ctx context.Context, client *http.Client, spec string) ([]byte, error) {
	if !isURL(spec) {
		// Read only when a regular file (follow.ReadFileAtMost): a named
		// pipe in the document's place would block the load, and with it
		// the reload or start, for good.
		b, err := follow.ReadFileAtMost(spec, maxDocumentBytes)
		if errors.Is(err, follow.ErrTooLarge) {
			return nil, fmt.Errorf("the document is larger than %d bytes", maxDocumentBytes)
		}
		return b, err
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %s", spec, resp.Status)
	}
	return readBounded(resp.Body)
}

// isURL reports whether spec names a document by an http(s) URL rather
// than a file.
func isURL(spec string) bool {
	return strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://")
}

// readBounded reads r up to the bound.
func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxDocumentBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDocumentBytes {
		return nil, fmt.Errorf("the document is larger than %d bytes", maxDocumentBytes)
	}
	return b, nil
}

// version is what a document says it is.
type version int

const (
	swagger2  version = iota + 1 // Swagger 2.0
	openapi30                    // OpenAPI 3.0.x
	openapi31                    // OpenAPI 3.1.x (and later 3.x)
)

// document is a parsed document: its JSON tree as encoding/json decodes it
// (objects are map[string]any, numbers json.Number), read by operation, so
// a problem in one operation (a $ref to nowhere, a parameter style no
// request can carry) costs that operation only. Nothing else about the
// document is checked: what the tools of the selected operations need is
// checked as they are made.
type document struct {
	root    map[string]any
	version version
}

// parse reads a document: JSON as JSON, anything else as YAML (of which
// JSON is a subset, so a JSON document with a syntax error is tried as
// YAML before it is refused). Only a document that is neither, or does
// not say it is OpenAPI 3 or Swagger 2.0, or has no paths, is an error.
func parse(data []byte) (*document, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var tree any
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '{' {
		jsonErr := decodeJSON(data, &tree)
		if jsonErr != nil {
			// A document that starts like JSON and is not JSON may still be
			// YAML (a flow mapping with comments); say what JSON said when
			// it is not that either.
			if yamlErr := decodeYAML(data, &tree); yamlErr != nil {
				return nil, fmt.Errorf("not a JSON document: %w", jsonErr)
			}
		}
	} else if err := decodeYAML(data, &tree); err != nil {
		return nil, fmt.Errorf("not a YAML or JSON document: %w", err)
	}
	root, ok := tree.(map[string]any)
	if !ok {
		return nil, errors.New("the document is not an object: want an OpenAPI 3.0 or 3.1 document (or swagger: \"2.0\")")
	}
	d := &document{root: root}
	// A version written unquoted in YAML (swagger: 2.0, openapi: 3.1) is a
	// number, kept as written.
	sw, oa := versionText(root["swagger"]), versionText(root["openapi"])
	switch {
	case root["swagger"] != nil:
		if !strings.HasPrefix(sw, "2.") {
			return nil, fmt.Errorf("swagger %q: want 2.0, or an OpenAPI 3 document", fmt.Sprint(root["swagger"]))
		}
		d.version = swagger2
	case strings.HasPrefix(oa, "3.0"):
		d.version = openapi30
	case strings.HasPrefix(oa, "3."):
		d.version = openapi31
	default:
		return nil, fmt.Errorf("openapi %q: want an OpenAPI 3.0 or 3.1 document (or swagger: \"2.0\")", fmt.Sprint(root["openapi"]))
	}
	paths, _ := root["paths"].(map[string]any)
	if len(paths) == 0 {
		return nil, errors.New("the document has no paths")
	}
	return d, nil
}

// versionText is a document's version field as written: text, or a
// number.
func versionText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return string(v)
	}
	return ""
}

// decodeJSON decodes data keeping numbers as written (json.Number), and
// says where a syntax error is as a line and column.
func decodeJSON(data []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := dec.Decode(v)
	if err == nil {
		if _, tokErr := dec.Token(); tokErr != io.EOF {
			return errors.New("data after the top-level value")
		}
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, se.Offset)
		return fmt.Errorf("line %d, column %d: %w", line, col, err)
	}
	return err
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col + 1
}

// resolve follows ref, a reference into the document ("#/components/…",
// a JSON pointer in a URI fragment), through any chain of references
// (what sits beside a $ref is not read), and returns what it names with
// the pointer it was found at. A reference
// to another file or URL is an error: the document is read alone.
func (d *document) resolve(ref string) (any, string, error) {
	seen := map[string]bool{}
	for range maxRefHops {
		if seen[ref] {
			return nil, "", fmt.Errorf("$ref %q: a cycle of references that names no value", ref)
		}
		seen[ref] = true
		v, err := d.pointer(ref)
		if err != nil {
			return nil, "", err
		}
		m, _ := v.(map[string]any)
		next, isRef := m["$ref"].(string)
		if !isRef {
			return v, ref, nil
		}
		ref = next
	}
	return nil, "", fmt.Errorf("$ref %q: more than %d references in a chain", ref, maxRefHops)
}

// pointer returns the value at ref, one reference, not followed further.
func (d *document) pointer(ref string) (any, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("$ref %q: a reference to another document; only references into the document itself (#/…) are followed", ref)
	}
	if p, err := url.PathUnescape(frag); err == nil {
		frag = p
	}
	if frag == "" {
		return d.root, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("$ref %q: not a JSON pointer (want #/…)", ref)
	}
	var cur any = d.root
	for tok := range strings.SplitSeq(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("$ref %q: the document has nothing there", ref)
			}
			cur = v
		case []any:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(c) || fmt.Sprint(i) != tok {
				return nil, fmt.Errorf("$ref %q: the document has nothing there", ref)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("$ref %q: the document has nothing there", ref)
		}
	}
	return cur, nil
}

// object resolves v when it is a reference and returns it as an object:
// what a parameter, request body, response or path item is.
func (d *document) object(v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want an object, got %s", kindOf(v))
	}
	if ref, isRef := m["$ref"].(string); isRef {
		target, _, err := d.resolve(ref)
		if err != nil {
			return nil, err
		}
		if m, ok = target.(map[string]any); !ok {
			return nil, fmt.Errorf("$ref %q: names %s, want an object", ref, kindOf(target))
		}
	}
	return m, nil
}

// kindOf names a JSON value's kind for an error.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// str is v[key] when it is a string.
func str(v map[string]any, key string) string {
	s, _ := v[key].(string)
	return s
}

// boolean is v[key] when it is a boolean, else def.
func boolean(v map[string]any, key string, def bool) bool {
	if b, ok := v[key].(bool); ok {
		return b
	}
	return def
}
