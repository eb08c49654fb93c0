package httpsource_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// normalizingUpstream answers as servers behind nginx or a WHATWG URL
// parser do: the path is percent-decoded (%2E is ".", RFC 3986 2.3),
// then dot segments and empty segments are removed, and only then routed.
// /admin answers with the secret header it received; anything else
// with its cleaned path.
func normalizingUpstream(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var admin []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := url.PathUnescape(r.URL.EscapedPath())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p = path.Clean(strings.ReplaceAll(p, `\`, "/"))
		if p == "/admin" {
			mu.Lock()
			admin = append(admin, r.Header.Get("X-Api-Key"))
			mu.Unlock()
			io.WriteString(w, `{"admin":"every user's data"}`)
			return
		}
		io.WriteString(w, `{"path":"`+p+`"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), admin...)
	}
}

// TestPathArgumentsStayInTheirSegment runs, through ExecuteBatch, path
// arguments that would take a request to another path of the upstream:
// a dot segment, even percent-encoded (which escaping alone left as
// "%2E%2E", the same ".." to a normalizing server), dots between encoded
// slashes or backslashes, two placeholders that make ".." together, and
// an empty value that leaves "//" (merged away by servers: /users//x is
// /users/x). Each is an INVALID_ARGUMENTS result naming the argument,
// and the upstream's /admin never sees the secret.
func TestPathArgumentsStayInTheirSegment(t *testing.T) {
	t.Setenv("TW_TRAVERSAL_KEY", "traversal-secret")
	up, admin := normalizingUpstream(t)
	c := serve(t, `
- name: get_user
  url: `+up.URL+`/api/users/{id}
  headers: {X-Api-Key: '{{TW_TRAVERSAL_KEY}}'}
  parameters: {type: object, properties: {id: {type: string}}, required: [id]}
  read_only: true
- name: get_posts
  url: `+up.URL+`/api/users/{id}/posts
  headers: {X-Api-Key: '{{TW_TRAVERSAL_KEY}}'}
  parameters: {type: object, properties: {id: {type: string}}, required: [id]}
  read_only: true
- name: get_version
  url: `+up.URL+`/api/v/{major}{minor}/x
  headers: {X-Api-Key: '{{TW_TRAVERSAL_KEY}}'}
  parameters: {type: object, properties: {major: {type: string}, minor: {type: string}}, required: [major, minor]}
  read_only: true
`, io.Discard)
	refused := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"get_user", map[string]any{"id": "../../admin"}, `argument "id": the URL path segment it fills reads "../../admin"`},
		{"get_posts", map[string]any{"id": ".."}, `argument "id": the URL path segment it fills reads ".."`},
		{"get_posts", map[string]any{"id": "."}, `argument "id": the URL path segment it fills reads "."`},
		{"get_user", map[string]any{"id": `..\..\admin`}, `reads "..\\..\\admin"`},
		{"get_user", map[string]any{"id": "%2e%2e/%2e%2e/admin"}, `reads "../../admin"`},
		{"get_posts", map[string]any{"id": ""}, `argument "id": it leaves an empty segment`},
		{"get_posts", map[string]any{"id": "/"}, `argument "id": it leaves an empty segment`},
		{"get_version", map[string]any{"major": ".", "minor": "."}, `arguments "major", "minor": the URL path segment it fills reads ".."`},
	}
	var calls []*toolwirev1.ToolCall
	for i, r := range refused {
		calls = append(calls, client.Call(string(rune('a'+i)), r.tool, r.args))
	}
	calls = append(calls, client.Call("ok", "get_user", map[string]any{"id": "a..b/c"}))
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	batch, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: calls}))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range refused {
		res := batch.Results[i]
		got := client.Text(res)
		if !res.GetIsError() || res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS || !strings.Contains(got, r.want) {
			t.Errorf("%s(%v): %v %v %q; want INVALID_ARGUMENTS with %q", r.tool, r.args, res.GetIsError(), res.GetErrorKind(), got, r.want)
		}
	}
	if ok := batch.Results[len(refused)]; ok.GetIsError() || client.Text(ok) != `{"path":"/api/users/a..b/c"}` {
		t.Errorf("a value with dots and a slash in it: %q; want it sent, escaped, to /api/users/a..b%%2Fc", client.Text(ok))
	}
	if got := admin(); len(got) > 0 {
		t.Errorf("the upstream's /admin was reached with secret header %q", got)
	}
}
