package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	httpsource "github.com/toolwire/toolwire/sources/http"
	"github.com/toolwire/toolwire/sources/internal/toolname"
	"github.com/toolwire/toolwire/tools"
)

// param is one parameter an operation sends.
type param struct {
	name    string // as the document names it
	prop    string // its property in the input schema
	in      string // path, query or header
	explode bool   // query arrays repeat the key (else comma-joined)
}

// bodyMode says how an operation's JSON body is made from the arguments.
type bodyMode int

const (
	noBody      bodyMode = iota
	mergedBody           // the body's properties sit beside the parameters
	wrappedBody          // the body is the argument named bodyProp
)

// operation runs the calls of one operation's tool.
type operation struct {
	method, path string // path as the document writes it, with {name}s
	base         string
	params       []param
	body         bodyMode
	bodyProp     string
	bodyRequired bool
	structured   bool // the tool declares an output schema
	send         *httpsource.Sender
}

// skipped is an operation that gives no tool, and why.
type skipped struct {
	route, reason string
}

// build returns the tools of doc's operations that c selects, sorted by
// path and method, and the operations it could not make tools of.
func build(c Config, doc *openapi3.T, send *httpsource.Sender) ([]tools.Tool, []skipped, error) {
	base, err := baseURL(c, doc)
	if err != nil {
		return nil, nil, err
	}
	used := map[string]bool{} // override keys that matched an operation
	taken := map[string]bool{}
	var out []tools.Tool
	var skips []skipped
	paths := slices.Sorted(maps.Keys(doc.Paths.Map()))
	for _, path := range paths {
		item := doc.Paths.Value(path)
		if item == nil {
			continue
		}
		ops := item.Operations()
		for _, method := range slices.Sorted(maps.Keys(ops)) {
			op := ops[method]
			if op == nil {
				continue
			}
			route := method + " " + path
			if !c.selects(op.OperationID, route) {
				continue
			}
			ov, hasOv := c.Operations[op.OperationID]
			if hasOv && op.OperationID != "" {
				used[op.OperationID] = true
			} else if ov, hasOv = c.Operations[route]; hasOv {
				used[route] = true
			}
			t, err := tool(c, base, path, method, item, op, ov, send, taken)
			if err != nil {
				skips = append(skips, skipped{route, err.Error()})
				continue
			}
			taken[t.Name] = true
			out = append(out, t)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Operations)) {
		if !used[k] {
			return nil, nil, fmt.Errorf("operations %q: no selected operation has this operationId or METHOD /path", k)
		}
	}
	return out, skips, nil
}

// tool makes the tool of one operation.
func tool(c Config, base, path, method string, item *openapi3.PathItem, op *openapi3.Operation, ov Override, send *httpsource.Sender, taken map[string]bool) (tools.Tool, error) {
	o := &operation{method: method, path: path, base: base, send: send}
	props := map[string]any{}
	var required []string

	// Parameters: the path item's, overridden by the operation's of the
	// same name and place.
	var plist []*openapi3.Parameter
	seen := map[string]int{}
	for _, group := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range group {
			if ref == nil || ref.Value == nil {
				continue
			}
			p := ref.Value
			key := p.In + ":" + p.Name
			if i, ok := seen[key]; ok {
				plist[i] = p
				continue
			}
			seen[key] = len(plist)
			plist = append(plist, p)
		}
	}
	for _, p := range plist {
		switch p.In {
		case openapi3.ParameterInPath, openapi3.ParameterInQuery, openapi3.ParameterInHeader:
		default: // cookie
			if p.Required {
				return tools.Tool{}, fmt.Errorf("parameter %q is sent in a %s, which toolwire does not send", p.Name, p.In)
			}
			continue
		}
		if p.In == openapi3.ParameterInHeader && !validHeaderName(p.Name) {
			return tools.Tool{}, fmt.Errorf("header parameter %q: not a valid header name", p.Name)
		}
		prop := p.Name
		if _, dup := props[prop]; dup {
			prop = p.Name + "_" + p.In
		}
		schemaRef := p.Schema
		if schemaRef == nil {
			if mt := jsonMedia(p.Content); mt != nil {
				schemaRef = mt.Schema
			}
		}
		s := newConverter(true).schema(schemaRef, 0)
		if _, ok := s["description"]; !ok && p.Description != "" {
			s["description"] = p.Description
		}
		props[prop] = s
		if p.Required || p.In == openapi3.ParameterInPath {
			required = append(required, prop)
		}
		explode := p.In == openapi3.ParameterInQuery && (p.Explode == nil || *p.Explode) && (p.Style == "" || p.Style == "form")
		o.params = append(o.params, param{name: p.Name, prop: prop, in: p.In, explode: explode})
	}
	for _, m := range pathParamRE.FindAllStringSubmatch(path, -1) {
		if !slices.ContainsFunc(o.params, func(p param) bool { return p.in == openapi3.ParameterInPath && p.name == m[1] }) {
			return tools.Tool{}, fmt.Errorf("path parameter {%s} is not declared", m[1])
		}
	}

	// The JSON request body.
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		mt := jsonMedia(rb.Value.Content)
		if mt == nil && len(rb.Value.Content) > 0 {
			// An upload without its file is not the operation.
			return tools.Tool{}, fmt.Errorf("the request body is not JSON (%s), which toolwire does not send", strings.Join(slices.Sorted(maps.Keys(rb.Value.Content)), ", "))
		}
		if mt != nil {
			o.bodyRequired = rb.Value.Required
			s := newConverter(true).schema(mt.Schema, 0)
			if mergeable(s, props) {
				o.body = mergedBody
				for k, v := range s["properties"].(map[string]any) {
					props[k] = v
				}
				if req, ok := s["required"].([]string); ok && o.bodyRequired {
					required = append(required, req...)
				}
			} else {
				o.body, o.bodyProp = wrappedBody, "body"
				for props[o.bodyProp] != nil {
					o.bodyProp += "_"
				}
				if _, ok := s["description"]; !ok && rb.Value.Description != "" {
					s["description"] = rb.Value.Description
				}
				props[o.bodyProp] = s
				if o.bodyRequired {
					required = append(required, o.bodyProp)
				}
			}
		}
	}
	input := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		input["required"] = slices.Compact(slices.Sorted(slices.Values(required)))
	}
	inJSON, err := json.Marshal(input)
	if err != nil {
		return tools.Tool{}, fmt.Errorf("input schema: %w", err)
	}

	// The output schema: the first 2xx JSON response's, when an object.
	var outJSON json.RawMessage
	if op.Responses != nil {
		for _, code := range slices.Sorted(maps.Keys(op.Responses.Map())) {
			if !strings.HasPrefix(code, "2") {
				continue
			}
			r := op.Responses.Value(code)
			if r == nil || r.Value == nil {
				continue
			}
			if mt := jsonMedia(r.Value.Content); mt != nil && mt.Schema != nil {
				s := newConverter(false).schema(mt.Schema, 0)
				if s["type"] == "object" {
					if outJSON, err = json.Marshal(s); err != nil {
						return tools.Tool{}, fmt.Errorf("output schema: %w", err)
					}
					o.structured = true
				}
			}
			break
		}
	}

	readOnly := method == http.MethodGet || method == http.MethodHead
	if ov.ReadOnly != nil {
		readOnly = *ov.ReadOnly
	}
	desc := ov.Description
	if desc == "" {
		desc = strings.TrimSpace(op.Summary)
		if d := strings.TrimSpace(op.Description); d != "" && d != desc {
			if desc != "" {
				desc += "\n\n"
			}
			desc += d
		}
		if desc == "" {
			desc = method + " " + path
		}
		if op.Deprecated {
			desc = "Deprecated. " + desc
		}
	}
	baseName := op.OperationID
	if baseName == "" {
		baseName = strings.ToLower(method) + strings.NewReplacer("/", "_", "{", "", "}", "").Replace(path)
	}
	t := tools.Tool{
		Name:         toolname.Make(c.Name, baseName, method+" "+path, taken),
		Description:  desc,
		InputSchema:  inJSON,
		OutputSchema: outJSON,
		Annotations: tools.Annotations{
			ReadOnly:    readOnly,
			Idempotent:  method != http.MethodPost && method != http.MethodPatch,
			Destructive: method == http.MethodDelete,
			OpenWorld:   true,
		},
		Timeout: ov.Timeout,
		Source:  tools.SourceHTTP,
		Handler: o.call,
	}
	// The registry compiles the schemas; one that does not compile skips
	// this operation, not the document.
	if _, err := tools.NewRegistry(t); err != nil {
		return tools.Tool{}, err
	}
	return t, nil
}

// mergeable reports whether a body schema's properties can sit beside the
// parameters: an object schema of properties alone, none named like a
// parameter.
func mergeable(s map[string]any, params map[string]any) bool {
	if s["type"] != "object" {
		return false
	}
	props, ok := s["properties"].(map[string]any)
	if !ok || len(props) == 0 {
		return false
	}
	for k := range s {
		switch k {
		case "type", "properties", "required", "title", "description":
		default:
			return false
		}
	}
	for k := range props {
		if _, ok := params[k]; ok {
			return false
		}
	}
	return true
}

// jsonMedia is content's JSON media type: application/json, or else one
// ending in +json or json.
func jsonMedia(content openapi3.Content) *openapi3.MediaType {
	if mt := content["application/json"]; mt != nil {
		return mt
	}
	for _, k := range slices.Sorted(maps.Keys(content)) {
		mime, _, _ := strings.Cut(k, ";")
		if strings.HasSuffix(strings.TrimSpace(mime), "json") {
			return content[k]
		}
	}
	return nil
}

var pathParamRE = regexp.MustCompile(`\{([^{}]+)\}`)

var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func validHeaderName(s string) bool { return headerNameRE.MatchString(s) }

// call runs one call: arguments into the path, query, headers and body,
// the request through the HTTP request layer, the JSON response as the
// result (and its structured content when there is an output schema).
func (o *operation) call(ctx context.Context, call *tools.Call) (*tools.Result, error) {
	d := json.NewDecoder(bytes.NewReader(call.Arguments))
	d.UseNumber()
	var args map[string]any
	if len(bytes.TrimSpace(call.Arguments)) > 0 {
		if err := d.Decode(&args); err != nil {
			return nil, fmt.Errorf("decoding arguments: %w", err)
		}
	}
	path := o.path
	var query []string
	header := http.Header{}
	params := make(map[string]bool, len(o.params))
	for _, p := range o.params {
		params[p.prop] = true
		v, ok := args[p.prop]
		if !ok || v == nil {
			if p.in == openapi3.ParameterInPath {
				return tools.Errorf("argument %q is required: the path uses it", p.prop), nil
			}
			continue
		}
		switch p.in {
		case openapi3.ParameterInPath:
			path = strings.ReplaceAll(path, "{"+p.name+"}", httpsource.PathEscape(joined(v)))
		case openapi3.ParameterInQuery:
			if a, ok := v.([]any); ok && p.explode {
				for _, e := range a {
					query = append(query, url.QueryEscape(p.name)+"="+url.QueryEscape(httpsource.ArgText(e)))
				}
				continue
			}
			query = append(query, url.QueryEscape(p.name)+"="+url.QueryEscape(joined(v)))
		case openapi3.ParameterInHeader:
			header.Set(p.name, joined(v))
		}
	}
	u := o.base + path
	if len(query) > 0 {
		u += "?" + strings.Join(query, "&")
	}
	req := httpsource.Request{Method: o.method, URL: u, Header: header}
	switch o.body {
	case mergedBody:
		rest := map[string]any{}
		for k, v := range args {
			if !params[k] {
				rest[k] = v
			}
		}
		if len(rest) > 0 || o.bodyRequired {
			b, err := json.Marshal(rest)
			if err != nil {
				return nil, err
			}
			req.Body = b
		}
	case wrappedBody:
		if v, ok := args[o.bodyProp]; ok {
			b, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			req.Body = b
		}
	}
	resp, res, err := o.send.Send(ctx, req)
	if resp == nil {
		return res, err
	}
	if o.method == http.MethodHead {
		return resp.Result(tools.Text("HTTP " + resp.StatusLine)), nil
	}
	return resp.Structured(o.structured), nil
}

// joined is how a parameter's value reads in a path, a non-exploded query
// or a header: an array's elements joined by commas (OpenAPI's simple and
// form styles), anything else as ArgText.
func joined(v any) string {
	if a, ok := v.([]any); ok {
		parts := make([]string, len(a))
		for i, e := range a {
			parts[i] = httpsource.ArgText(e)
		}
		return strings.Join(parts, ",")
	}
	return httpsource.ArgText(v)
}
