package openapi

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Swagger 2.0 is read as it is written, not converted to OpenAPI 3 first:
// its schemas are JSON Schema as OpenAPI 3.0's are, and references into
// it (#/definitions/…, #/parameters/…) are JSON pointers like any other.
// Only what differs is translated, per operation: parameters of type and
// collectionFormat become a schema and a style, a body parameter the
// request body, formData parameters a form body, and consumes and produces
// the media types.

// paramKeywords are the JSON Schema keywords a Swagger 2.0 parameter (or
// items object) carries itself.
var paramKeywords = []string{"type", "format", "enum", "default", "minimum", "maximum", "exclusiveMinimum",
	"exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems", "uniqueItems", "multipleOf", "x-nullable"}

func (d *document) spec2(s *opSpec) error {
	var body *bodySpec
	var form map[string]any // properties of a form body
	var formRequired []any  // its required names
	formEnc := map[string]encodingSpec{}
	multipart := false
	params, err := d.parameters(s.opRef, func(m map[string]any) (paramSpec, error) {
		p := paramSpec{name: str(m, "name"), in: str(m, "in"), description: str(m, "description"), required: boolean(m, "required", false)}
		if p.name == "" && p.in != "body" && (p.required || p.in == "path") {
			return p, skip(reasonDocument, "a parameter has no name")
		}
		if p.name == "" && p.in != "body" {
			return p, nil // optional: the tool leaves it out
		}
		switch p.in {
		case "body":
			body = &bodySpec{kind: bodyJSON, required: p.required, description: p.description, schema: m["schema"]}
		case "formData":
			if str(m, "type") == "file" {
				multipart = true
			}
			if form == nil {
				form = map[string]any{}
			}
			form[p.name] = paramSchema2(m)
			if p.required {
				formRequired = append(formRequired, p.name)
			}
			style, explode, err := collectionFormat(m, "query")
			if err != nil {
				return p, err
			}
			formEnc[p.name] = encodingSpec{style: style, explode: explode}
		case "path", "query", "header":
			if p.in == "path" {
				p.required = true
			}
			p.schema = paramSchema2(m)
			var err error
			if p.style, p.explode, err = collectionFormat(m, p.in); err != nil {
				return p, err
			}
		default:
			return p, skip(reasonDocument, "parameter %q: in %q: want path, query, header, body or formData", p.name, p.in)
		}
		return p, nil
	})
	if err != nil {
		return err
	}
	for _, p := range params {
		if p.in == "path" || p.in == "query" || p.in == "header" {
			s.params = append(s.params, p)
		}
	}
	consumes := mediaTypes(s.op, d.root, "consumes")
	switch {
	case body != nil:
		if len(consumes) == 0 {
			consumes = []string{"application/json"}
		}
		content := map[string]any{}
		for _, c := range consumes {
			content[c] = true
		}
		_, kind, ct := pickBody(content)
		if kind != bodyJSON {
			return skip(reasonBody, "the request body is %s, which toolwire does not send (it sends JSON and application/x-www-form-urlencoded)", strings.Join(consumes, ", "))
		}
		body.contentType = ct
		s.body = body
	case form != nil:
		if multipart || slices.Contains(consumes, "multipart/form-data") && !slices.Contains(consumes, "application/x-www-form-urlencoded") {
			return skip(reasonBody, "the request body is multipart/form-data, which toolwire does not send (it sends JSON and application/x-www-form-urlencoded)")
		}
		schema := map[string]any{"type": "object", "properties": form}
		if len(formRequired) > 0 {
			schema["required"] = formRequired
		}
		s.body = &bodySpec{kind: bodyForm, contentType: "application/x-www-form-urlencoded", required: len(formRequired) > 0, schema: schema, encoding: formEnc}
	}
	produces := mediaTypes(s.op, d.root, "produces")
	answersJSON := len(produces) == 0
	for _, p := range produces {
		if _, kind, _ := mediaRank(p); kind == bodyJSON {
			answersJSON = true
		}
	}
	if responses, ok := s.op["responses"].(map[string]any); ok && answersJSON {
		for _, code := range slices.Sorted(maps.Keys(responses)) {
			if !strings.HasPrefix(code, "2") {
				continue
			}
			if r, err := d.object(responses[code]); err == nil && r["schema"] != nil {
				s.output = r["schema"]
				break
			}
		}
	}
	return nil
}

// paramSchema2 is the schema of a Swagger 2.0 parameter (or items)
// object: its own JSON Schema keywords, items converted alike.
func paramSchema2(m map[string]any) map[string]any {
	s := map[string]any{}
	for _, k := range paramKeywords {
		if v, ok := m[k]; ok {
			s[k] = v
		}
	}
	if s["type"] == "file" {
		s["type"] = "string"
	}
	if items, ok := m["items"].(map[string]any); ok {
		if _, isRef := items["$ref"]; isRef {
			s["items"] = items
		} else {
			s["items"] = paramSchema2(items)
		}
	}
	return s
}

// collectionFormat turns a Swagger 2.0 parameter's collectionFormat into
// an OpenAPI 3 style and explode for a parameter in the place in.
func collectionFormat(m map[string]any, in string) (style string, explode bool, err error) {
	cf := str(m, "collectionFormat")
	if cf == "" {
		cf = "csv"
	}
	switch {
	case cf == "csv" && (in == "path" || in == "header"):
		return "simple", false, nil
	case cf == "csv":
		return "form", false, nil
	case cf == "multi" && in == "query":
		return "form", true, nil
	case cf == "ssv" && in == "query":
		return "spaceDelimited", false, nil
	case cf == "pipes" && in == "query":
		return "pipeDelimited", false, nil
	}
	return "", false, skip(reasonStyle, "parameter %q: collectionFormat %q in %s is not sent by toolwire", str(m, "name"), cf, in)
}

// mediaTypes is the operation's list under key (consumes or produces), or
// else the document's.
func mediaTypes(op, root map[string]any, key string) []string {
	for _, owner := range []map[string]any{op, root} {
		if list, ok := owner[key].([]any); ok {
			var out []string
			for _, v := range list {
				if s, ok := v.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
	}
	return nil
}

// swaggerServer is a Swagger 2.0 document's server: its first scheme
// (https preferred), host and basePath; a relative URL without a host.
func swaggerServer(root map[string]any) string {
	host := str(root, "host")
	base := str(root, "basePath")
	if host == "" {
		return base
	}
	scheme := "https"
	if list := mediaTypes(nil, root, "schemes"); len(list) > 0 && !slices.Contains(list, "https") {
		scheme = list[0]
	}
	return fmt.Sprintf("%s://%s%s", scheme, host, base)
}
