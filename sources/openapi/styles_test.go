package openapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/tools"
)

// request is what a recording server saw of one request.
type request struct {
	Method, URI, ContentType, Color, Body string
}

// recorder is a server that records each request and answers {}.
func recorder(t *testing.T) (*httptest.Server, chan request) {
	t.Helper()
	got := make(chan request, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- request{r.Method, r.RequestURI, r.Header.Get("Content-Type"), r.Header.Get("Color"), string(b)}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// writeDoc writes doc as a JSON document in a temporary folder.
func writeDoc(t *testing.T, doc map[string]any) string {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "api.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func loadRegistry(t *testing.T, cfg Config) *tools.Registry {
	t.Helper()
	logs := &strings.Builder{}
	ts, err := Load(t.Context(), cfg, nil, newLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "skipping") {
		t.Errorf("operations were skipped:\n%s", logs)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestStyles sends a parameter in every style OpenAPI 3.1 defines, with
// and without explode, in the path, the query and a header, and checks
// what the server receives against the specification's table of style
// examples (color = "blue", ["blue","black","brown"] and
// {"R":100,"G":200,"B":150}; an object's members go in name order, which
// JSON objects do not keep).
func TestStyles(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	paths := map[string]any{}
	type want struct{ str, arr, obj string }
	cases := map[string]want{}
	add := func(in, style string, explode bool, w want) {
		name := fmt.Sprintf("%s_%s_%v", in, style, explode)
		path := "/" + name
		if in == "path" {
			path += "/{color}"
		}
		paths[path] = map[string]any{"get": map[string]any{
			"operationId": name,
			"parameters":  []any{map[string]any{"name": map[bool]string{true: "Color", false: "color"}[in == "header"], "in": in, "required": in == "path", "style": style, "explode": explode}},
			"responses":   map[string]any{"200": map[string]any{"description": "ok"}},
		}}
		cases[name] = w
	}
	add("path", "simple", false, want{"blue", "blue,black,brown", "B,150,G,200,R,100"})
	add("path", "simple", true, want{"blue", "blue,black,brown", "B=150,G=200,R=100"})
	add("path", "label", false, want{".blue", ".blue,black,brown", ".B,150,G,200,R,100"})
	add("path", "label", true, want{".blue", ".blue.black.brown", ".B=150.G=200.R=100"})
	add("path", "matrix", false, want{";color=blue", ";color=blue,black,brown", ";color=B,150,G,200,R,100"})
	add("path", "matrix", true, want{";color=blue", ";color=blue;color=black;color=brown", ";B=150;G=200;R=100"})
	add("query", "form", false, want{"color=blue", "color=blue,black,brown", "color=B,150,G,200,R,100"})
	add("query", "form", true, want{"color=blue", "color=blue&color=black&color=brown", "B=150&G=200&R=100"})
	add("query", "spaceDelimited", false, want{"color=blue", "color=blue%20black%20brown", "color=B%20150%20G%20200%20R%20100"})
	add("query", "pipeDelimited", false, want{"color=blue", "color=blue%7Cblack%7Cbrown", "color=B%7C150%7CG%7C200%7CR%7C100"})
	add("query", "deepObject", true, want{"color=blue", "color%5B0%5D=blue&color%5B1%5D=black&color%5B2%5D=brown", "color%5BB%5D=150&color%5BG%5D=200&color%5BR%5D=100"})
	add("header", "simple", false, want{"blue", "blue,black,brown", "B,150,G,200,R,100"})
	add("header", "simple", true, want{"blue", "blue,black,brown", "B=150,G=200,R=100"})
	spec := writeDoc(t, map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "styles", "version": "1"}, "paths": paths})
	reg := loadRegistry(t, Config{Name: "s", Spec: spec, BaseURL: srv.URL})

	values := map[string]string{"str": `"blue"`, "arr": `["blue","black","brown"]`, "obj": `{"R":100,"G":200,"B":150}`}
	for name, w := range cases {
		in, _, _ := strings.Cut(name, "_")
		for kind, v := range values {
			expect := map[string]string{"str": w.str, "arr": w.arr, "obj": w.obj}[kind]
			prop := map[bool]string{true: "Color", false: "color"}[in == "header"]
			res := call(t, reg, "s_"+name, `{"`+prop+`":`+v+`}`)
			if res.IsError {
				t.Errorf("%s(%s): %s", name, v, text(res))
				continue
			}
			r := <-got
			var sent string
			switch in {
			case "path":
				sent = strings.TrimPrefix(r.URI, "/"+name+"/")
			case "query":
				_, sent, _ = strings.Cut(r.URI, "?")
			case "header":
				sent = r.Color
			}
			if sent != expect {
				t.Errorf("%s with %s: sent %q; want %q", name, v, sent, expect)
			}
		}
	}
}

// TestParameterValues: reserved characters are escaped unless
// allowReserved says otherwise, a parameter of JSON content is sent as
// JSON text, and a nested value where the style cannot carry one (the
// schema left it open) is an error result, with nothing sent.
func TestParameterValues(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	spec := writeDoc(t, map[string]any{"openapi": "3.0.3", "info": map[string]any{"title": "v", "version": "1"}, "paths": map[string]any{
		"/v/{id}": map[string]any{"get": map[string]any{"operationId": "values", "parameters": []any{
			map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}},
			map[string]any{"name": "raw", "in": "query", "allowReserved": true, "schema": map[string]any{"type": "string"}},
			map[string]any{"name": "esc", "in": "query", "schema": map[string]any{"type": "string"}},
			map[string]any{"name": "filter", "in": "query", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
			map[string]any{"name": "open", "in": "query", "schema": map[string]any{}},
		}, "responses": map[string]any{"200": map[string]any{"description": "ok"}}}},
	}})
	reg := loadRegistry(t, Config{Name: "v", Spec: spec, BaseURL: srv.URL})
	res := call(t, reg, "v_values", `{"id":"a/b;c,d","raw":"a/b?c=d","esc":"a/b?c=d","filter":{"a":[1,"x y"]},"open":[1,2]}`)
	if res.IsError {
		t.Fatal(text(res))
	}
	want := "/v/a%2Fb%3Bc%2Cd?raw=a/b?c=d&esc=a%2Fb%3Fc%3Dd&filter=%7B%22a%22%3A%5B1%2C%22x+y%22%5D%7D&open=1&open=2"
	if r := <-got; r.URI != want {
		t.Errorf("sent %s\nwant %s", r.URI, want)
	}
	res = call(t, reg, "v_values", `{"id":"x","open":[{"a":1}]}`)
	if !res.IsError || !strings.Contains(text(res), `argument "open": style form cannot carry a nested object or array`) {
		t.Errorf("a nested value in form style: %s", text(res))
	}
	select {
	case r := <-got:
		t.Errorf("a call with a value its style cannot carry was sent: %+v", r)
	default:
	}
}

// TestFormBodies: Stripe's API takes application/x-www-form-urlencoded
// bodies, even on GET its parameters are deepObject, and nested objects
// and arrays are written in brackets: as the encoding says (deepObject),
// and for an object whose encoding says nothing (shipping), since form
// style would drop its name. The server checks each request as
// Stripe's would read it.
func TestFormBodies(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	deep := map[string]any{"style": "deepObject", "explode": true}
	str := map[string]any{"type": "string"}
	spec := writeDoc(t, map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "stripe-like", "version": "1"}, "paths": map[string]any{
		"/v1/customers": map[string]any{
			"get": map[string]any{"operationId": "GetCustomers", "parameters": []any{
				map[string]any{"name": "created", "in": "query", "style": "deepObject", "explode": true, "schema": map[string]any{"anyOf": []any{
					map[string]any{"type": "object", "properties": map[string]any{"gt": map[string]any{"type": "integer"}, "lte": map[string]any{"type": "integer"}}},
					map[string]any{"type": "integer"}}}},
				map[string]any{"name": "expand", "in": "query", "style": "deepObject", "explode": true, "schema": map[string]any{"type": "array", "items": str}},
			}, "requestBody": map[string]any{"content": map[string]any{"application/x-www-form-urlencoded": map[string]any{"schema": map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false}}}},
				"responses": map[string]any{"200": map[string]any{"description": "ok"}}},
			"post": map[string]any{"operationId": "PostCustomers", "requestBody": map[string]any{"required": true, "content": map[string]any{"application/x-www-form-urlencoded": map[string]any{
				"schema": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
					"email":             str,
					"metadata":          map[string]any{"anyOf": []any{map[string]any{"type": "object", "additionalProperties": str}, map[string]any{"type": "string", "enum": []any{""}}}},
					"address":           map[string]any{"type": "object", "properties": map[string]any{"line1": str, "city": str}},
					"expand":            map[string]any{"type": "array", "items": str},
					"items":             map[string]any{"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{"price": str, "quantity": map[string]any{"type": "integer"}}}},
					"tags":              map[string]any{"type": "array", "items": str},
					"preferred_locales": map[string]any{"type": "array", "items": str},
					"shipping":          map[string]any{"type": "object", "properties": map[string]any{"name": str}},
				}},
				"encoding": map[string]any{"metadata": deep, "address": deep, "expand": deep, "items": deep, "preferred_locales": map[string]any{"style": "form", "explode": false}},
			}}}, "responses": map[string]any{"200": map[string]any{"description": "ok"}}},
		},
	}})
	reg := loadRegistry(t, Config{Name: "stripe", Spec: spec, BaseURL: srv.URL})

	post, _ := reg.Snapshot().Lookup("stripe_PostCustomers")
	if !strings.Contains(string(post.InputSchema), `"email"`) || strings.Contains(string(post.InputSchema), `"body"`) {
		t.Errorf("the form body's properties should be the arguments: %s", post.InputSchema)
	}
	res := call(t, reg, "stripe_PostCustomers", `{"email":"a+b@example.com","metadata":{"order":"6735","note":"x y"},"address":{"line1":"1 Main St","city":"Zürich"},
		"expand":["sources","tax_ids"],"items":[{"price":"price_1","quantity":2},{"price":"price_2"}],"tags":["a","b"],"preferred_locales":["en","fr"],"shipping":{"name":"Jo"}}`)
	if res.IsError {
		t.Fatal(text(res))
	}
	r := <-got
	want := "address%5Bcity%5D=Z%C3%BCrich&address%5Bline1%5D=1+Main+St&email=a%2Bb%40example.com&expand%5B0%5D=sources&expand%5B1%5D=tax_ids" +
		"&items%5B0%5D%5Bprice%5D=price_1&items%5B0%5D%5Bquantity%5D=2&items%5B1%5D%5Bprice%5D=price_2" +
		"&metadata%5Bnote%5D=x+y&metadata%5Border%5D=6735&preferred_locales=en,fr&shipping%5Bname%5D=Jo&tags=a&tags=b"
	if r.Method != "POST" || r.ContentType != "application/x-www-form-urlencoded" || r.Body != want {
		t.Errorf("PostCustomers sent %s %s\n%s\nwant\n%s", r.Method, r.ContentType, r.Body, want)
	}
	// A form reader (Stripe's, Rack's, PHP's) decodes the bracketed
	// names it nests values by.
	form, err := url.ParseQuery(r.Body)
	if err != nil || form.Get("items[0][quantity]") != "2" || form.Get("address[city]") != "Zürich" || form.Get("email") != "a+b@example.com" {
		t.Errorf("read back: %v (%v)", form, err)
	}
	// Clearing metadata is an empty string.
	call(t, reg, "stripe_PostCustomers", `{"metadata":""}`)
	if r := <-got; r.Body != "metadata=" {
		t.Errorf("clearing metadata sent %q", r.Body)
	}

	get, _ := reg.Snapshot().Lookup("stripe_GetCustomers")
	if strings.Contains(string(get.InputSchema), `"body"`) {
		t.Errorf("a form body of no members is offered as an argument: %s", get.InputSchema)
	}
	res = call(t, reg, "stripe_GetCustomers", `{"created":{"gt":1700000000,"lte":1800000000},"expand":["data.default_source"]}`)
	r = <-got
	if res.IsError || r.URI != "/v1/customers?created%5Bgt%5D=1700000000&created%5Blte%5D=1800000000&expand%5B0%5D=data.default_source" || r.Body != "" {
		t.Errorf("GetCustomers sent %s %q (%s)", r.URI, r.Body, text(res))
	}
	call(t, reg, "stripe_GetCustomers", `{"created":1700000000}`)
	if r := <-got; r.URI != "/v1/customers?created=1700000000" {
		t.Errorf("a deepObject parameter given a number sent %s", r.URI)
	}
}

// TestMediaTypes: a body of */*, application/*, a +json type or a
// wildcard +json type is JSON (Kubernetes declares */*), JSON is chosen
// over a form, merge patch over JSON Patch, and the Content-Type sent is
// the one chosen (application/json for a wildcard).
func TestMediaTypes(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t)
	obj := map[string]any{"schema": map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}
	op := func(id string, types ...string) map[string]any {
		content := map[string]any{}
		for _, ct := range types {
			content[ct] = obj
		}
		return map[string]any{"operationId": id, "requestBody": map[string]any{"content": content}, "responses": map[string]any{"200": map[string]any{"description": "ok"}}}
	}
	spec := writeDoc(t, map[string]any{"openapi": "3.0.3", "info": map[string]any{"title": "m", "version": "1"}, "paths": map[string]any{
		"/any":      map[string]any{"post": op("any", "*/*")},
		"/app":      map[string]any{"post": op("app", "application/*")},
		"/wild":     map[string]any{"post": op("wild", "application/*+json")},
		"/vnd":      map[string]any{"post": op("vnd", "application/vnd.api+json")},
		"/both":     map[string]any{"post": op("both", "application/x-www-form-urlencoded", "application/json; charset=utf-8")},
		"/patch":    map[string]any{"patch": op("patch", "application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml")},
		"/formonly": map[string]any{"post": op("formonly", "application/x-www-form-urlencoded")},
	}})
	reg := loadRegistry(t, Config{Name: "m", Spec: spec, BaseURL: srv.URL})
	for id, want := range map[string][2]string{
		"any":      {"application/json", `{"name":"x y"}`},
		"app":      {"application/json", `{"name":"x y"}`},
		"wild":     {"application/json", `{"name":"x y"}`},
		"vnd":      {"application/vnd.api+json", `{"name":"x y"}`},
		"both":     {"application/json; charset=utf-8", `{"name":"x y"}`},
		"patch":    {"application/merge-patch+json", `{"name":"x y"}`},
		"formonly": {"application/x-www-form-urlencoded", `name=x+y`},
	} {
		if res := call(t, reg, "m_"+id, `{"name":"x y"}`); res.IsError {
			t.Errorf("%s: %s", id, text(res))
			continue
		}
		if r := <-got; r.ContentType != want[0] || r.Body != want[1] {
			t.Errorf("%s sent %s %s; want %s %s", id, r.ContentType, r.Body, want[0], want[1])
		}
	}
}

// TestServers: an operation's own servers, or its path item's, are where
// its requests go; the others go to the document's. A relative server is
// resolved against where the others go. base_url replaces them all.
func TestServers(t *testing.T) {
	t.Parallel()
	docSrv, docGot := recorder(t)
	pathSrv, pathGot := recorder(t)
	opSrv, opGot := recorder(t)
	get := func(id string, servers ...string) map[string]any {
		op := map[string]any{"operationId": id, "responses": map[string]any{"200": map[string]any{"description": "ok"}}}
		if len(servers) > 0 {
			op["servers"] = []any{map[string]any{"url": servers[0]}}
		}
		return op
	}
	spec := writeDoc(t, map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "s", "version": "1"},
		"servers": []any{map[string]any{"url": "{root}/api", "variables": map[string]any{"root": map[string]any{"default": docSrv.URL}}}},
		"paths": map[string]any{
			"/plain":    map[string]any{"get": get("plain")},
			"/uploads":  map[string]any{"servers": []any{map[string]any{"url": pathSrv.URL + "/up"}}, "get": get("pathLevel"), "put": get("opLevel", opSrv.URL+"/op/")},
			"/relative": map[string]any{"get": get("relative", "v2")},
			"/netpath":  map[string]any{"get": get("netpath", "//"+strings.TrimPrefix(pathSrv.URL, "http://")+"/np")},
		}})
	reg := loadRegistry(t, Config{Name: "s", Spec: spec})
	for id, want := range map[string]struct {
		got chan request
		uri string
	}{
		"plain":     {docGot, "/api/plain"},
		"pathLevel": {pathGot, "/up/uploads"},
		"opLevel":   {opGot, "/op/uploads"},
		"relative":  {docGot, "/api/v2/relative"},
		"netpath":   {pathGot, "/np/netpath"},
	} {
		if res := call(t, reg, "s_"+id, `{}`); res.IsError {
			t.Errorf("%s: %s", id, text(res))
			continue
		}
		if r := <-want.got; r.URI != want.uri {
			t.Errorf("%s went to %s; want %s", id, r.URI, want.uri)
		}
	}
	// base_url is where the config's secrets go: it replaces every server
	// the document names, its operations' too, except those below it (a
	// network-path server, "//host/np", names a host: it is replaced too).
	reg = loadRegistry(t, Config{Name: "s", Spec: spec, BaseURL: opSrv.URL + "/base", Headers: map[string]string{"Authorization": "Bearer x"}})
	for id, uri := range map[string]string{"plain": "/base/plain", "pathLevel": "/base/uploads", "opLevel": "/base/uploads", "relative": "/base/v2/relative", "netpath": "/base/netpath"} {
		call(t, reg, "s_"+id, `{}`)
		select { // the recorder hears a request before it answers
		case r := <-opGot:
			if r.URI != uri {
				t.Errorf("%s with base_url went to %s; want %s", id, r.URI, uri)
			}
		default:
			t.Errorf("%s with base_url did not go to base_url", id)
		}
	}
	select {
	case r := <-pathGot:
		t.Errorf("a request with base_url set went to the path item's server: %+v", r)
	case r := <-docGot:
		t.Errorf("a request with base_url set went to the document's server: %+v", r)
	default:
	}
}

// nestedShapesDoc declares query parameters whose items are objects
// without saying type: object where it stands, as AWS's documents do
// (allOf: [{$ref: Tag}, {xml: …}]), and as properties alone, and one
// whose items may be a string.
const nestedShapesDoc = `{"openapi": "3.0.0", "info": {"title": "shapes", "version": "1"},
 "paths": {
  "/#Action=AddTags": {"get": {"operationId": "addTags", "parameters": [
    {"name": "Tags", "in": "query", "required": true, "schema": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/Tag"}, {"xml": {"name": "Tag"}}]}}}]}},
  "/filters": {"get": {"operationId": "filters", "parameters": [
    {"name": "filters", "in": "query", "schema": {"allOf": [{"$ref": "#/components/schemas/Filters"}]}}]}},
  "/either": {"get": {"operationId": "either", "parameters": [
    {"name": "ids", "in": "query", "schema": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"$ref": "#/components/schemas/Tag"}]}}}]}}
 },
 "components": {"schemas": {
  "Tag": {"type": "object", "properties": {"Key": {"type": "string"}, "Value": {"type": "string"}}},
  "Filters": {"type": "array", "items": {"properties": {"name": {"type": "string"}}}}
 }}}`

// TestNestedShapes: a required parameter whose values nest objects is
// skipped at load with the reason, however its schema says they are
// objects (AWS's AddTagsToResource loaded, and every call, its Tags
// required, was an error result: "style form cannot carry a nested object
// or array"); an optional one is left out of its tool, with a line saying
// so (EC2's DescribeInstances is a tool without its Filter); one whose
// items may be strings stays.
func TestNestedShapes(t *testing.T) {
	t.Parallel()
	logs := &strings.Builder{}
	ts, err := Load(t.Context(), Config{Name: "s", Spec: writeDoc(t, mustJSON(t, nestedShapesDoc)), BaseURL: "http://127.0.0.1:9"}, nil, newLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]string{}
	var names []string
	for _, tl := range ts {
		names = append(names, tl.Name)
		schemas[tl.Name] = string(tl.InputSchema)
	}
	if !slices.Equal(names, []string{"s_either", "s_filters"}) {
		t.Errorf("tools %v; want s_either and s_filters:\n%s", names, logs)
	}
	if s := schemas["s_filters"]; strings.Contains(s, "filters") {
		t.Errorf("s_filters offers the parameter it cannot send: %s", s)
	}
	if s := schemas["s_either"]; !strings.Contains(s, `"ids"`) {
		t.Errorf("s_either lost ids: %s", s)
	}
	for _, want := range []string{
		`"msg":"skipping OpenAPI operation","openapi":"s","operation":"GET /#Action=AddTags","reason":"parameter \"Tags\": its values nest objects or arrays, which style form cannot carry (only deepObject can)"`,
		`"msg":"leaving out an optional OpenAPI parameter","openapi":"s","operation":"GET /filters","reason":"parameter \"filters\": its values nest objects or arrays`,
		`"tools":2,"excluded":0,"skipped":1,"parameters_left_out":1,"skipped_because":{"parameter_style":1}`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no line says %s:\n%s", want, logs)
		}
	}
}
