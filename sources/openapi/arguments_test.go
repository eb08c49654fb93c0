package openapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// TestPathParametersStayInTheirSegment calls an operation whose path
// parameters are written in simple, label and matrix style against an
// upstream that decodes and normalizes paths before routing (as nginx
// and WHATWG URL parsers do: %2E is "."). Label style adds a "." of its
// own, so the value "." made ".%2E": ".." to such a server, and /admin
// got the document's secret header. Each such value is an
// INVALID_ARGUMENTS result naming the argument, and nothing is sent.
func TestPathParametersStayInTheirSegment(t *testing.T) {
	t.Setenv("TW_OPENAPI_TRAVERSAL", "openapi-secret")
	var mu sync.Mutex
	var reached []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := url.PathUnescape(r.URL.EscapedPath())
		p = path.Clean(p)
		mu.Lock()
		reached = append(reached, p+" "+r.Header.Get("X-Api-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"path":"` + p + `"}`))
	}))
	t.Cleanup(srv.Close)
	doc := filepath.Join(t.TempDir(), "doc.yaml")
	if err := os.WriteFile(doc, []byte(`openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /api/items/{id}:
    get:
      operationId: getItem
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: ok}}
  /api/labels/{label}/x:
    get:
      operationId: getLabel
      parameters:
        - {name: label, in: path, required: true, style: label, schema: {type: string}}
      responses: {"200": {description: ok}}
  /api/items/{list}/x:
    get:
      operationId: getList
      parameters:
        - {name: list, in: path, required: true, schema: {type: array, items: {type: string}}}
      responses: {"200": {description: ok}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := Load(t.Context(), Config{Name: "t", Spec: doc, BaseURL: srv.URL, Headers: map[string]string{"X-Api-Key": "{{TW_OPENAPI_TRAVERSAL}}"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ tool, args, want string }{
		{"t_getItem", `{"id":"../../admin"}`, `argument "id": the URL path segment it fills reads "../../admin"`},
		{"t_getItem", `{"id":".."}`, `argument "id": the URL path segment it fills reads ".."`},
		{"t_getItem", `{"id":""}`, `argument "id": it leaves an empty segment`},
		{"t_getLabel", `{"label":"."}`, `argument "label": the URL path segment it fills reads ".."`},
		{"t_getList", `{"list":[""]}`, `argument "list": it leaves an empty segment`},
	} {
		res := call(t, reg, tt.tool, tt.args)
		if !res.IsError || res.ErrorKind != int32(toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS) || !strings.Contains(text(res), tt.want) {
			t.Errorf("%s(%s): %q (kind %d); want INVALID_ARGUMENTS with %q", tt.tool, tt.args, text(res), res.ErrorKind, tt.want)
		}
	}
	if res := call(t, reg, "t_getItem", `{"id":"v1..2"}`); res.IsError || !strings.Contains(text(res), `"path":"/api/items/v1..2"`) {
		t.Errorf("getItem(v1..2): %s; want it sent", text(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reached) != 1 {
		t.Errorf("the upstream saw %q; want only the last call", reached)
	}
}

// TestUndeclaredArgumentsNotSent calls an operation whose JSON body's
// members are merged into the arguments with one argument neither a
// parameter nor a member: the input schema allows more properties, and
// it went into the body ({"name":"x","role":"admin"}), a field the
// operation does not have (mass assignment). It is left out now.
func TestUndeclaredArgumentsNotSent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		body = string(b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	doc := filepath.Join(t.TempDir(), "doc.yaml")
	if err := os.WriteFile(doc, []byte(`openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /users/{id}:
    patch:
      operationId: updateUser
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {"200": {description: ok}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := Load(t.Context(), Config{Name: "t", Spec: doc, BaseURL: srv.URL}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, reg, "t_updateUser", `{"id":"7","name":"x","role":"admin"}`); res.IsError {
		t.Fatalf("updateUser: %s", text(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if body != `{"name":"x"}` {
		t.Errorf("the upstream got the body %s; want {\"name\":\"x\"}", body)
	}
}
