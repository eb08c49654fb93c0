package openapi

import (
	"fmt"
	"maps"
	"mime"
	"slices"
	"strings"
)

// methods are the HTTP methods a path item may hold operations for, by
// the document's (lower-case) keys.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// opRef is one operation of the document, found but not yet read.
type opRef struct {
	path, method string         // method upper-case
	item         map[string]any // the path item, its $ref followed
	op           map[string]any
	id           string // operationId; "" when none
}

func (r opRef) route() string { return r.method + " " + r.path }

// operations lists the document's operations, by path and method, and the
// path items that could not be read (a $ref to nowhere), each of which
// costs its own operations only.
func (d *document) operations() ([]opRef, []skipped) {
	paths, _ := d.root["paths"].(map[string]any)
	var out []opRef
	var bad []skipped
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		if strings.HasPrefix(path, "x-") {
			continue // an extension (x-codegen-contextRoot), not a path
		}
		item, err := d.object(paths[path])
		if err != nil {
			bad = append(bad, skipped{route: "* " + path, reason: reasonDocument, detail: "path item: " + err.Error()})
			continue
		}
		var ms []string
		for _, m := range methods {
			if _, ok := item[m]; ok {
				ms = append(ms, strings.ToUpper(m))
			}
		}
		slices.Sort(ms)
		for _, m := range ms {
			op, ok := item[strings.ToLower(m)].(map[string]any)
			if !ok {
				bad = append(bad, skipped{route: m + " " + path, reason: reasonDocument, detail: "the operation is not an object"})
				continue
			}
			id, _ := op["operationId"].(string)
			out = append(out, opRef{path: path, method: m, item: item, op: op, id: id})
		}
	}
	return out, bad
}

// paramSpec is one parameter as the request carries it.
type paramSpec struct {
	name, in      string
	required      bool
	description   string
	deprecated    bool
	schema        any    // its schema node (may be a $ref), nil for any value
	style         string // form, simple, label, matrix, spaceDelimited, pipeDelimited, deepObject
	explode       bool
	allowReserved bool
	asJSON        bool // content: application/json: the value is sent as JSON text
}

// Kinds of request body toolwire sends.
const (
	bodyJSON = "json"
	bodyForm = "form" // application/x-www-form-urlencoded
)

// bodySpec is an operation's request body.
type bodySpec struct {
	kind        string // bodyJSON or bodyForm
	contentType string // sent as Content-Type
	required    bool
	description string
	schema      any
	encoding    map[string]encodingSpec // form bodies: by property
}

// encodingSpec is how one property of a form body is written.
type encodingSpec struct {
	style         string
	explode       bool
	allowReserved bool
}

// opSpec is what one operation's tool is made of, the same for every
// version of the document.
type opSpec struct {
	opRef
	summary, description string
	deprecated           bool
	params               []paramSpec
	body                 *bodySpec
	output               any   // the schema of its first 2xx JSON response; nil when none
	servers              []any // its own or its path item's servers; nil for the document's
}

// spec reads what r's tool needs, the references it uses followed. Its
// error is why the operation cannot be a tool.
func (d *document) spec(r opRef) (*opSpec, error) {
	s := &opSpec{opRef: r, summary: str(r.op, "summary"), description: str(r.op, "description"), deprecated: boolean(r.op, "deprecated", false)}
	var err error
	if d.version == swagger2 {
		err = d.spec2(s)
	} else {
		err = d.spec3(s)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// skipError is an operation that cannot be a tool, with the reason's
// kind for the document's summary line.
type skipError struct {
	reason string
	err    error
}

func (e *skipError) Error() string { return e.err.Error() }

func skip(reason, format string, args ...any) error {
	return &skipError{reason: reason, err: fmt.Errorf(format, args...)}
}

// The kinds of reason an operation gives no tool, as the summary line
// counts them.
const (
	reasonDocument = "document"         // a $ref to nowhere, a value of the wrong kind
	reasonBody     = "request_body"     // a file upload, XML, …
	reasonCookie   = "cookie_parameter" // a required one
	reasonStyle    = "parameter_style"
	reasonServer   = "server"
	reasonSchema   = "input_schema" // does not compile
)

// parameters merges the path item's parameters with the operation's (the
// operation's win by name and place), each read by read.
func (d *document) parameters(r opRef, read func(m map[string]any) (paramSpec, error)) ([]paramSpec, error) {
	var out []paramSpec
	at := map[string]int{}
	for _, owner := range []map[string]any{r.item, r.op} {
		raw, ok := owner["parameters"]
		if !ok || raw == nil {
			continue
		}
		list, ok := raw.([]any)
		if !ok {
			return nil, skip(reasonDocument, "parameters: want an array, got %s", kindOf(raw))
		}
		for i, p := range list {
			m, err := d.object(p)
			if err != nil {
				return nil, skip(reasonDocument, "parameter %d: %v", i, err)
			}
			ps, err := read(m)
			if err != nil {
				return nil, err
			}
			key := ps.in + ":" + ps.name
			if j, dup := at[key]; dup {
				out[j] = ps
				continue
			}
			at[key] = len(out)
			out = append(out, ps)
		}
	}
	return out, nil
}

func (d *document) spec3(s *opSpec) error {
	params, err := d.parameters(s.opRef, d.param3)
	if err != nil {
		return err
	}
	s.params = params
	if raw, ok := s.op["requestBody"]; ok && raw != nil {
		rb, err := d.object(raw)
		if err != nil {
			return skip(reasonDocument, "requestBody: %v", err)
		}
		content, _ := rb["content"].(map[string]any)
		if len(content) > 0 {
			mt, kind, ct := pickBody(content)
			if kind == "" {
				return skip(reasonBody, "the request body is %s, which toolwire does not send (it sends JSON and application/x-www-form-urlencoded)", strings.Join(slices.Sorted(maps.Keys(content)), ", "))
			}
			media, err := d.object(content[mt])
			if err != nil {
				return skip(reasonDocument, "requestBody %s: %v", mt, err)
			}
			b := &bodySpec{kind: kind, contentType: ct, required: boolean(rb, "required", false), description: str(rb, "description"), schema: media["schema"]}
			if kind == bodyForm {
				b.encoding = encodings(media["encoding"])
			}
			s.body = b
		}
	}
	if responses, ok := s.op["responses"].(map[string]any); ok {
		for _, code := range slices.Sorted(maps.Keys(responses)) {
			if !strings.HasPrefix(code, "2") {
				continue
			}
			r, err := d.object(responses[code])
			if err != nil {
				continue // the output schema is optional; a broken one is left out
			}
			content, _ := r["content"].(map[string]any)
			if mt := pickJSON(content); mt != "" {
				if media, err := d.object(content[mt]); err == nil && media["schema"] != nil {
					s.output = media["schema"]
					break
				}
			}
		}
	}
	for _, owner := range []map[string]any{s.op, s.item} {
		if list, ok := owner["servers"].([]any); ok && len(list) > 0 {
			s.servers = list
			break
		}
	}
	return nil
}

// param3 reads an OpenAPI 3 parameter object.
func (d *document) param3(m map[string]any) (paramSpec, error) {
	p := paramSpec{name: str(m, "name"), in: str(m, "in"), description: str(m, "description"),
		required: boolean(m, "required", false), deprecated: boolean(m, "deprecated", false),
		schema: m["schema"], style: str(m, "style"), allowReserved: boolean(m, "allowReserved", false)}
	if p.name == "" && (p.required || p.in == "path") {
		return p, skip(reasonDocument, "a parameter has no name")
	}
	switch p.in {
	case "path", "query", "header", "cookie":
	default:
		return p, skip(reasonDocument, "parameter %q: in %q: want path, query, header or cookie", p.name, p.in)
	}
	if p.in == "path" {
		p.required = true
	}
	if p.schema == nil {
		if content, ok := m["content"].(map[string]any); ok && len(content) > 0 {
			mt := pickJSON(content)
			if mt == "" {
				return p, skip(reasonStyle, "parameter %q: its content is %s; toolwire sends parameter content only as JSON", p.name, strings.Join(slices.Sorted(maps.Keys(content)), ", "))
			}
			media, err := d.object(content[mt])
			if err != nil {
				return p, skip(reasonDocument, "parameter %q: %v", p.name, err)
			}
			p.schema, p.asJSON = media["schema"], true
		}
	}
	if p.style == "" {
		p.style = defaultStyle(p.in)
	}
	p.explode = boolean(m, "explode", p.style == "form")
	return p, nil
}

func defaultStyle(in string) string {
	if in == "query" || in == "cookie" {
		return "form"
	}
	return "simple"
}

// encodings reads a form body's encoding map.
func encodings(raw any) map[string]encodingSpec {
	m, _ := raw.(map[string]any)
	out := make(map[string]encodingSpec, len(m))
	for name, v := range m {
		e, _ := v.(map[string]any)
		es := encodingSpec{style: str(e, "style"), allowReserved: boolean(e, "allowReserved", false)}
		if es.style == "" {
			es.style = "form"
		}
		es.explode = boolean(e, "explode", es.style == "form")
		out[name] = es
	}
	return out
}

// mediaRank orders the media types toolwire can send a body as: JSON
// first (application/json, then other JSON types, JSON Patch last since
// its body is a list of edits, then wildcards, sent as JSON), then forms.
// kind is "" for a type it cannot send.
func mediaRank(mt string) (rank int, kind, contentType string) {
	base, _, err := mime.ParseMediaType(mt)
	if err != nil {
		base = strings.ToLower(strings.TrimSpace(strings.Split(mt, ";")[0]))
	}
	switch {
	case base == "application/json":
		return 0, bodyJSON, mt
	case base == "application/json-patch+json":
		return 2, bodyJSON, mt
	case strings.Contains(base, "*"):
		if base == "*/*" || base == "application/*" || strings.HasSuffix(base, "+json") {
			return 3, bodyJSON, "application/json"
		}
	case strings.HasSuffix(base, "+json") || strings.HasSuffix(base, "/json"):
		return 1, bodyJSON, mt
	case base == "application/x-www-form-urlencoded":
		return 4, bodyForm, base
	}
	return 0, "", ""
}

// pickBody chooses the media type of a request body's content.
func pickBody(content map[string]any) (mt, kind, contentType string) {
	best := -1
	for _, k := range slices.Sorted(maps.Keys(content)) {
		r, kd, ct := mediaRank(k)
		if kd != "" && (best < 0 || r < best) {
			best, mt, kind, contentType = r, k, kd, ct
		}
	}
	return mt, kind, contentType
}

// pickJSON chooses the JSON media type of a response's (or a parameter's)
// content; "" when none is JSON.
func pickJSON(content map[string]any) string {
	mt, kind, _ := pickBody(content)
	if kind != bodyJSON {
		return ""
	}
	return mt
}
