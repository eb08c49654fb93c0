package httpsource

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// request is what the test upstream saw of one request.
type request struct {
	Method, Path, RawPath, Query string
	Header                       http.Header
	Body                         string
}

// upstream is an httptest server that records requests and answers with
// the handler set for a path, or 200 {"ok":true}.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []request
}

func newUpstream(t *testing.T, handlers map[string]http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, request{r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Header.Clone(), string(b)})
		u.mu.Unlock()
		for prefix, h := range handlers {
			if strings.HasPrefix(r.URL.Path, prefix) {
				h(w, r)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) last(t *testing.T) request {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		t.Fatal("the upstream saw no request")
	}
	return u.seen[len(u.seen)-1]
}

// load decodes YAML http_tools specs, as the config file holds them, and
// returns the registry of their tools.
func load(t *testing.T, specsYAML string) *tools.Registry {
	t.Helper()
	var specs []Spec
	if err := yaml.UnmarshalStrict([]byte(specsYAML), &specs); err != nil {
		t.Fatal(err)
	}
	client := NewClient()
	t.Cleanup(client.CloseIdleConnections)
	ts, err := Tools(specs, client)
	if err != nil {
		t.Fatalf("Tools: %v", err)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// call validates args and runs the named tool as the server would.
func call(t *testing.T, reg *tools.Registry, name, args string) *tools.Result {
	t.Helper()
	tool, ok := reg.Snapshot().Lookup(name)
	if !ok {
		t.Fatalf("no tool %q", name)
	}
	valid, err := tool.ValidateArguments(args)
	if err != nil {
		t.Fatalf("%s(%s): %v", name, args, err)
	}
	res, err := tool.Handler(context.Background(), tools.NewCall("c1", name, valid, nil))
	if err != nil {
		t.Fatalf("%s(%s): handler error %v", name, args, err)
	}
	return res
}

func text(r *tools.Result) string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	const params = `parameters: {type: object, properties: {id: {type: string}}}`
	tests := []struct {
		name, yaml string
		want       []string // each must appear in the error
	}{
		{"bad name", "- name: 'has space'\n  url: http://x/", []string{`"has space"`, "name must match"}},
		{"empty name", "- url: http://x/", []string{`tool ""`, "name must match"}},
		{"undeclared placeholder", "- name: get_user\n  url: http://x/users/{user}\n  " + params, []string{`"get_user"`, "{user}", "not a property declared"}},
		{"env var in the URL", "- name: q\n  url: 'http://x/s?key={{API_KEY}}'", []string{`"q"`, "url: {{API_KEY}}: environment variables go in headers only"}},
		{"env var in the body", "- name: q\n  method: POST\n  url: http://x/\n  body: {key: '{{API_KEY}}'}", []string{`"q"`, "body: {{API_KEY}}: environment variables go in headers only"}},
		{"undeclared query placeholder", "- name: q\n  url: http://x/s?q={query}\n  " + params, []string{`"q"`, "{query}"}},
		{"placeholder in host", "- name: h\n  url: http://{id}.example.com/\n  " + params, []string{`"h"`, "not the host"}},
		{"not http", "- name: f\n  url: file:///etc/passwd", []string{`"f"`, "http:// or https://"}},
		{"credentials in the URL", "- name: c\n  url: https://user:pw@x/", []string{`"c"`, "credentials in the URL"}},
		{"credentials in a URL of another scheme", "- name: c\n  url: ftp://user:pw@x/", []string{`"c"`, "http:// or https://", "xxxxx@x"}},
		{"credentials and no host", "- name: c\n  url: https://user:pw@/x", []string{`"c"`}},
		{"no host", "- name: f\n  url: http:///x", []string{`"f"`, "no host"}},
		{"bad env var name", "- name: auth\n  url: http://x/\n  headers: {Authorization: 'Bearer {{1TOKEN}}'}", []string{`"auth"`, "{{1TOKEN}}", "environment variable names"}},
		{"env var in single braces", "- name: auth\n  url: http://x/\n  headers: {Authorization: 'Bearer {TOKEN}'}", []string{`"auth"`, `header "Authorization": {TOKEN} would be sent as it is written; an environment variable is written {{TOKEN}}`}},
		{"env var with dash", "- name: auth\n  url: http://x/\n  headers: {X-Key: '{{API-KEY}}'}", []string{`"auth"`, "{{API-KEY}}"}},
		{"bad header name", "- name: hn\n  url: http://x/\n  headers: {'Bad Header': v}", []string{`"hn"`, `"Bad Header"`}},
		{"bad method", "- name: m\n  method: FETCH\n  url: http://x/", []string{`"m"`, `method "FETCH"`}},
		{"body with GET", "- name: b\n  url: http://x/\n  body: {a: 1}", []string{`"b"`, "GET requests carry no body"}},
		{"body with DELETE", "- name: b\n  method: DELETE\n  url: http://x/\n  body: {a: 1}", []string{`"b"`, "DELETE requests carry no body"}},
		{"undeclared body placeholder", "- name: b\n  method: POST\n  url: http://x/\n  body: {a: '{nope}'}\n  " + params, []string{`"b"`, "{nope}"}},
		{"schema does not compile", "- name: s\n  url: http://x/\n  parameters: {type: object, properties: {id: {type: strin}}}", []string{`"s"`, "input schema"}},
		{"schema root not object", "- name: s\n  url: http://x/\n  parameters: {type: array}", []string{`"s"`, `root type "object"`}},
		{"parameters not an object", "- name: s\n  url: http://x/\n  parameters: [1]", []string{`"s"`, "parameters must be"}},
		{"bad response_path", "- name: p\n  url: http://x/\n  response_path: 'a..b'", []string{`"p"`, "response_path", "empty segment"}},
		{"bad response_path index", "- name: p\n  url: http://x/\n  response_path: 'a[x]'", []string{`"p"`, "non-negative integer"}},
		{"unclosed bracket", "- name: p\n  url: http://x/\n  response_path: 'a['", []string{`"p"`, "response_path"}},
		{"duplicate", "- name: d\n  url: http://x/\n- name: d\n  url: http://y/", []string{"http_tools[1]", `"d"`, "used twice"}},
		{"negative timeout", "- name: neg\n  url: http://x/\n  timeout: -1s", []string{`"neg"`, "negative timeout"}},
		// What JSON Schema lets pass but a schema written for a tool cannot mean.
		{"misspelt keyword", "- name: k\n  url: http://x/{id}\n  parameters: {type: object, properties: {id: {type: string}}, requierd: [id]}", []string{`"k"`, `parameters.requierd: not a JSON Schema keyword (did you mean "required"?)`}},
		{"misspelt nested keyword", "- name: k\n  url: http://x/\n  parameters: {type: object, properties: {num: {type: integer, minimun: 1}}}", []string{`"k"`, `parameters.properties.num.minimun: not a JSON Schema keyword (did you mean "minimum"?)`}},
		{"misspelt keyword in a list", "- name: k\n  url: http://x/\n  parameters: {type: object, properties: {num: {anyOf: [{type: integer}, {typ: string}]}}}", []string{`parameters.properties.num.anyOf[1].typ: not a JSON Schema keyword (did you mean "type"?)`}},
		{"required not declared", "- name: r\n  url: http://x/\n  parameters: {type: object, properties: {q: {type: string}}, required: [query]}", []string{`"r"`, `parameters.required: "query" is not declared in parameters.properties: an argument not declared is never sent`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var specs []Spec
			if err := yaml.UnmarshalStrict([]byte(tt.yaml), &specs); err != nil {
				t.Fatal(err)
			}
			_, err := Tools(specs, http.DefaultClient)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "pw@") {
				t.Errorf("error %q shows the URL's credentials", err)
			}
		})
	}
}

func TestDeclaration(t *testing.T) {
	t.Parallel()
	reg := load(t, `
- name: get_user
  title: Get user
  description: Looks a user up.
  url: https://api.example.com/users/{id}
  timeout: 5s
  parameters: {type: object, properties: {id: {type: string}}, required: [id]}
  read_only: true
  idempotent: true
- name: send
  method: post
  url: https://api.example.com/send
`)
	get, _ := reg.Snapshot().Lookup("get_user")
	want := tools.Annotations{ReadOnly: true, Idempotent: true, OpenWorld: true}
	if get.Annotations != want || get.Source != tools.SourceHTTP || get.Timeout.String() != "5s" || get.Title != "Get user" || get.Description != "Looks a user up." {
		t.Errorf("get_user = %+v", get)
	}
	send, _ := reg.Snapshot().Lookup("send")
	if send.Annotations.ReadOnly || string(send.InputSchema) != `{"type":"object"}` {
		t.Errorf("send: read_only %v, schema %s; want not read-only by default, an empty object schema", send.Annotations.ReadOnly, send.InputSchema)
	}
	if _, err := get.ValidateArguments(`{}`); err == nil {
		t.Error("get_user accepted arguments without the required id")
	}
}

func TestURL(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	reg := load(t, `
- name: get
  url: `+up.URL+`/users/{id}/posts?q={q}&tag={tags}&sort=new&limit={limit}&v=1
  parameters:
    type: object
    properties:
      id: {type: string}
      q: {type: string}
      tags: {type: array, items: {type: string}}
      limit: {type: integer}
      extra: {type: string}
      flag: {type: boolean}
- name: plain
  url: `+up.URL+`/search
  parameters: {type: object, properties: {q: {type: string}, "n": {type: number}, opt: {type: [string, "null"]}}}
`)
	tests := []struct {
		name, tool, args string
		path, raw, query string
		wantErr          string
	}{
		{"escapes path and query", "get", `{"id":"a/b c?","q":"x&y=z é","limit":10}`,
			"/users/a/b c?/posts", "/users/a%2Fb%20c%3F/posts", "q=x%26y%3Dz+%C3%A9&sort=new&limit=10&v=1", ""},
		{"dot dot cannot climb", "get", `{"id":".."}`, "", "", "", `argument "id": the URL path segment it fills reads ".."`},
		{"dots inside a value are text", "get", `{"id":"v1..2"}`, "/users/v1..2/posts", "", "sort=new&v=1", ""},
		{"absent optional query field is left out; array repeats", "get", `{"id":"7","tags":["a b","c"]}`,
			"/users/7/posts", "", "tag=a+b&tag=c&sort=new&v=1", ""},
		{"unused arguments of GET go to the query", "get", `{"id":"7","extra":"e&","flag":true}`,
			"/users/7/posts", "", "sort=new&v=1&extra=e%26&flag=true", ""},
		{"arguments the schema does not declare are not sent", "get", `{"id":"7","access_token":"x","v":"2"}`,
			"/users/7/posts", "", "sort=new&v=1", ""},
		{"no placeholders", "plain", `{"q":"hi there","n":1.50,"opt":null}`, "/search", "", "n=1.50&q=hi+there", ""},
		{"missing path field", "get", `{}`, "", "", "", `argument "id" is required: the URL path uses it`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, reg, tt.tool, tt.args)
			if tt.wantErr != "" {
				if !res.IsError || !strings.Contains(text(res), tt.wantErr) {
					t.Errorf("result %+v; want an error result with %q", res, tt.wantErr)
				}
				return
			}
			if res.IsError {
				t.Fatalf("error result: %s", text(res))
			}
			got := up.last(t)
			if got.Path != tt.path || got.RawPath != tt.raw || got.Query != tt.query || got.Method != "GET" || got.Body != "" {
				t.Errorf("upstream saw %s path %q raw %q query %q body %q\nwant GET path %q raw %q query %q, no body", got.Method, got.Path, got.RawPath, got.Query, got.Body, tt.path, tt.raw, tt.query)
			}
		})
	}
}

func TestBody(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	props := `{type: object, properties: {id: {type: string}, title: {type: string}, num: {type: integer}, tags: {type: array}, meta: {type: object}}}`
	reg := load(t, `
- name: template
  method: POST
  url: `+up.URL+`/items/{id}
  parameters: `+props+`
  body: {item: {title: '{title}', count: '{num}', tags: ['{tags}', fixed], note: 'id {id}: {title}', meta: '{meta}'}, v: 2}
- name: args
  method: PATCH
  url: `+up.URL+`/items/{id}
  parameters: `+props+`
- name: del
  method: DELETE
  url: `+up.URL+`/items/{id}
  parameters: `+props+`
`)
	tests := []struct {
		name, tool, args, method, body string
	}{
		{"template", "template", `{"id":"7","title":"Hi \"x\"","num":3,"tags":["a"],"meta":{"k":1}}`, "POST",
			`{"item":{"count":3,"meta":{"k":1},"note":"id 7: Hi \"x\"","tags":[["a"],"fixed"],"title":"Hi \"x\""},"v":2}`},
		{"absent fields drop members and are null in arrays", "template", `{"id":"7"}`, "POST",
			`{"item":{"note":"id 7: ","tags":[null,"fixed"]},"v":2}`},
		{"no template: the arguments the URL did not use", "args", `{"id":"7","title":"t","num":1}`, "PATCH", `{"num":1,"title":"t"}`},
		{"no template: undeclared arguments are not sent", "args", `{"id":"7","title":"t","role":"admin"}`, "PATCH", `{"title":"t"}`},
		{"DELETE sends no body", "del", `{"id":"7","title":"t"}`, "DELETE", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if res := call(t, reg, tt.tool, tt.args); res.IsError {
				t.Fatalf("error result: %s", text(res))
			}
			got := up.last(t)
			if got.Method != tt.method || got.Path != "/items/7" {
				t.Errorf("upstream saw %s %s; want %s /items/7", got.Method, got.Path, tt.method)
			}
			if tt.body == "" {
				if got.Body != "" || got.Header.Get("Content-Type") != "" {
					t.Errorf("body %q, Content-Type %q; want none", got.Body, got.Header.Get("Content-Type"))
				}
				return
			}
			var gotDoc, wantDoc any
			if err := json.Unmarshal([]byte(got.Body), &gotDoc); err != nil {
				t.Fatalf("body %q: %v", got.Body, err)
			}
			json.Unmarshal([]byte(tt.body), &wantDoc)
			if diff := cmp.Diff(wantDoc, gotDoc); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if ct := got.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

func TestResponsePath(t *testing.T) {
	t.Parallel()
	const doc = `{"data":{"items":[{"name":"first","n":1.10},{"name":"second","tags":["x"]}],"count":2,"0":"zero"}}`
	up := newUpstream(t, map[string]http.HandlerFunc{
		"/doc":  func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, doc) },
		"/text": func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "plain <b>text</b>") },
	})
	tests := []struct{ path, want string }{
		{"", doc},
		{"data.items[0].name", "first"},
		{"data.items.1.name", "second"},
		{"data.items[1].tags", `["x"]`},
		{"data.items[0].n", "1.10"},
		{"data.items[1]", `{"name":"second","tags":["x"]}`},
		{"data.count", "2"},
		{"data.0", "zero"},
		{"data[0]", "null"},
		{"data.items[5].name", "null"},
		{"data.missing.deeper", "null"},
		{"data.items.name", "null"},
		{"data.items[0][0]", "null"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			reg := load(t, "- {name: t, url: "+up.URL+"/doc, response_path: '"+tt.path+"'}")
			res := call(t, reg, "t", `{}`)
			if res.IsError || text(res) != tt.want {
				t.Errorf("got %q (error %v); want %q", text(res), res.IsError, tt.want)
			}
		})
	}
	t.Run("not JSON", func(t *testing.T) {
		t.Parallel()
		reg := load(t, "- {name: t, url: "+up.URL+"/text, response_path: a.b}")
		// A 2xx answer is the answer: its text, with why response_path
		// did not apply in details.
		if res := call(t, reg, "t", `{}`); res.IsError || !strings.Contains(text(res), "plain <b>text</b>") ||
			!strings.Contains(string(res.Details), `"status":200`) || !strings.Contains(string(res.Details), `so response_path does not apply`) {
			t.Errorf("got %q (error %v, details %s); want the body delivered", text(res), res.IsError, res.Details)
		}
	})
}

func TestStatusErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 3000) // 6000 bytes; the excerpt cuts between runes
	up := newUpstream(t, map[string]http.HandlerFunc{
		"/missing": func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":"no such user"}`, http.StatusNotFound)
		},
		"/long":  func(w http.ResponseWriter, _ *http.Request) { http.Error(w, long, http.StatusInternalServerError) },
		"/moved": func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotModified) },
	})
	reg := load(t, `
- {name: missing, url: `+up.URL+`/missing}
- {name: long, url: `+up.URL+`/long}
- {name: moved, url: `+up.URL+`/moved}
- {name: refused, url: 'http://127.0.0.1:1/'}
`)
	res := call(t, reg, "missing", `{}`)
	if !res.IsError || !strings.Contains(text(res), "HTTP 404 Not Found") || !strings.Contains(text(res), "no such user") {
		t.Errorf("404: %q", text(res))
	}
	var det details
	if err := json.Unmarshal(res.Details, &det); err != nil || det.Status != 404 || det.Method != "GET" || !strings.HasSuffix(det.URL, "/missing") {
		t.Errorf("details %s (%v)", res.Details, err)
	}
	res = call(t, reg, "long", `{}`)
	if got := text(res); !res.IsError || !strings.Contains(got, "HTTP 500") || len(got) > errorExcerptBytes+200 || !strings.Contains(got, "more bytes]") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("500 with a long body: %d bytes, %q…", len(got), got[:min(len(got), 200)])
	}
	if res := call(t, reg, "moved", `{}`); !res.IsError || !strings.Contains(text(res), "HTTP 304") {
		t.Errorf("304: %q; want an error result", text(res))
	}
	if res := call(t, reg, "refused", `{}`); !res.IsError || !strings.Contains(text(res), "request failed") {
		t.Errorf("refused: %q", text(res))
	}
}

func TestResponseBounded(t *testing.T) {
	t.Parallel()
	big := `{"a":"` + strings.Repeat("x", DefaultMaxResponseBytes) + `"}`
	up := newUpstream(t, map[string]http.HandlerFunc{
		"/big": func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) },
	})
	reg := load(t, `
- {name: raw, url: `+up.URL+`/big}
- {name: path, url: `+up.URL+`/big, response_path: a}
`)
	res := call(t, reg, "raw", `{}`)
	if got := text(res); res.IsError || len(got) > DefaultMaxResponseBytes+100 || !strings.Contains(got, "[response truncated") {
		t.Errorf("raw: error %v, %d bytes; want at most %d and a marker", res.IsError, len(got), DefaultMaxResponseBytes)
	}
	var det details
	json.Unmarshal(res.Details, &det)
	if !det.Truncated || det.Bytes != DefaultMaxResponseBytes {
		t.Errorf("details %+v", det)
	}
	// Too large to select from, it is still the answer: the text it
	// began with, marked, and why in details.
	if res := call(t, reg, "path", `{}`); res.IsError || !strings.Contains(text(res), "[response truncated") || !strings.Contains(string(res.Details), "too large to select response_path from") {
		t.Errorf("path: %q (error %v, details %s); want the start of the answer", text(res)[:min(200, len(text(res)))], res.IsError, res.Details)
	}
}

func TestHead(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	reg := load(t, "- {name: h, method: HEAD, url: "+up.URL+"/x}")
	if res := call(t, reg, "h", `{"a":1}`); res.IsError || !strings.Contains(text(res), "HTTP 200") || up.last(t).Method != "HEAD" {
		t.Errorf("HEAD: %q", text(res))
	}
}

// TestEnvHeaders is not parallel: it sets environment variables.
func TestEnvHeaders(t *testing.T) {
	up := newUpstream(t, nil)
	reg := load(t, `
- name: auth
  url: `+up.URL+`/x
  headers:
    Authorization: 'Bearer {{TW_TEST_TOKEN}}'
    X-Both: '{{TW_TEST_A}}-{{TW_TEST_B}}'
    X-Plain: literal {not a var}
`)
	// Set after loading: the environment is read at call time.
	t.Setenv("TW_TEST_TOKEN", "tok1")
	t.Setenv("TW_TEST_A", "a")
	t.Setenv("TW_TEST_B", "b")
	if res := call(t, reg, "auth", `{}`); res.IsError {
		t.Fatal(text(res))
	}
	h := up.last(t).Header
	if h.Get("Authorization") != "Bearer tok1" || h.Get("X-Both") != "a-b" || h.Get("X-Plain") != "literal {not a var}" {
		t.Errorf("headers %v", h)
	}

	t.Setenv("TW_TEST_TOKEN", "tok2")
	call(t, reg, "auth", `{}`)
	if got := up.last(t).Header.Get("Authorization"); got != "Bearer tok2" {
		t.Errorf("after changing the variable: %q; want it read again", got)
	}

	t.Setenv("TW_TEST_A", "secretpart\nbreak")
	if res := call(t, reg, "auth", `{}`); !res.IsError || strings.Contains(text(res), "secretpart") {
		t.Errorf("variable with a line break: %q; want an error without the value", text(res))
	}
	t.Setenv("TW_TEST_A", "a")

	n := len(up.seen)
	unsetEnv(t, "TW_TEST_B")
	res := call(t, reg, "auth", `{}`)
	if !res.IsError || !strings.Contains(text(res), "TW_TEST_B") || strings.Contains(text(res), "tok2") {
		t.Errorf("unset variable: %q; want an error naming TW_TEST_B", text(res))
	}
	if len(up.seen) != n {
		t.Error("a request was sent although a variable was unset")
	}
}

// unsetEnv unsets name until the test ends.
func unsetEnv(t *testing.T, name string) {
	t.Setenv(name, "") // restores the old value at the end
	os.Unsetenv(name)
}

// TestTraceContinues: an HTTP tool's request carries the call's trace
// (traceparent, tracestate), so the upstream's spans join it, as
// docs/observability.md says of the requests tools make; never the
// baggage the agent sent toolwire. A call with no trace sends neither.
func TestTraceContinues(t *testing.T) {
	up := newUpstream(t, nil)
	reg := load(t, `
- name: get
  url: `+up.URL+`/x
`)
	tool, _ := reg.Snapshot().Lookup("get")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x0a, 0xf7, 1}, SpanID: trace.SpanID{0xb7, 2},
		TraceFlags: trace.FlagsSampled, TraceState: must(trace.ParseTraceState("agent=1"))})
	bag := must(baggage.Parse("tenant=acme,user.secret=s3cr3t"))
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), bag)
	if res, err := tool.Handler(ctx, tools.NewCall("c1", "get", json.RawMessage(`{}`), nil)); err != nil || res.IsError {
		t.Fatalf("%v %v", err, res)
	}
	h := up.last(t).Header
	if got, want := h.Get("Traceparent"), "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01"; got != want {
		t.Errorf("traceparent %q; want %q", got, want)
	}
	if got := h.Get("Tracestate"); got != "agent=1" {
		t.Errorf("tracestate %q; want agent=1", got)
	}
	if got := h.Values("Baggage"); len(got) != 0 {
		t.Errorf("the upstream saw the agent's baggage %q", got)
	}

	if res := call(t, reg, "get", `{}`); res.IsError {
		t.Fatal(text(res))
	}
	if h := up.last(t).Header; h.Get("Traceparent") != "" || h.Get("Tracestate") != "" {
		t.Errorf("a call without a trace sent traceparent %q, tracestate %q", h.Get("Traceparent"), h.Get("Tracestate"))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestCutOffAnswerIsTheAnswer: a 2xx response whose body is cut off (the
// connection lost, the call's time up) says the server did what was
// asked: it is the result, with what came and a marker, never an error
// or a timeout, which a model would retry into doing it twice; a GET's
// deadline stays a timeout, since sending it again does no harm. A
// non-2xx one stays an error.
func TestCutOffAnswerIsTheAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	lose := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(status)
			io.WriteString(w, `{"id":42,"`)
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}
	}
	up := newUpstream(t, map[string]http.HandlerFunc{
		"/lost": lose(http.StatusCreated),
		"/fail": lose(http.StatusInternalServerError),
		"/slow": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"id":7`)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		},
	})
	reg := load(t, `
- {name: raw, method: POST, url: `+up.URL+`/lost}
- {name: path, method: POST, url: `+up.URL+`/lost, response_path: id}
- {name: fail, method: POST, url: `+up.URL+`/fail}
- {name: slow, method: POST, url: `+up.URL+`/slow}
- {name: slow_get, url: `+up.URL+`/slow}
`)
	for _, name := range []string{"raw", "path"} {
		res := call(t, reg, name, `{}`)
		var det details
		json.Unmarshal(res.Details, &det)
		if res.IsError || !strings.HasPrefix(text(res), `{"id":42,"`) || !strings.Contains(text(res), "[response cut off after 10 bytes") ||
			!strings.Contains(text(res), "201 Created") || det.Status != 201 || det.CutOff == "" {
			t.Errorf("%s: error %v %q, details %s; want the answer so far, marked as cut off", name, res.IsError, text(res), res.Details)
		}
	}
	if res := call(t, reg, "fail", `{}`); !res.IsError || !strings.Contains(text(res), "reading the response") {
		t.Errorf("a 500 cut off: error %v %q; want an error", res.IsError, text(res))
	}
	tool, _ := reg.Snapshot().Lookup("slow")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := tool.Handler(ctx, tools.NewCall("c1", "slow", json.RawMessage(`{}`), nil))
	if err != nil || res.IsError || !strings.HasPrefix(text(res), `{"id":7`) || !strings.Contains(text(res), "time ran out") {
		t.Errorf("a POST's 200 whose body outlasted the call: %v, %+v; want the answer so far, marked", err, res)
	}
	// A GET sent again does no harm: its deadline is a timeout, as it was.
	tool, _ = reg.Snapshot().Lookup("slow_get")
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if res, err := tool.Handler(ctx, tools.NewCall("c2", "slow_get", json.RawMessage(`{}`), nil)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a GET's 200 whose body outlasted the call: %v, %+v; want the deadline", err, res)
	}
}

// TestLostBeforeTheAnswer: a POST whose connection broke before any
// answer may have been done; the error says so, where a GET's (safe to
// send again) and one that never reached a server do not.
func TestLostBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	hangUp := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the whole request came
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}
	up := newUpstream(t, map[string]http.HandlerFunc{"/hangup": hangUp})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String()
	closed.Close() // nothing listens there
	reg := load(t, `
- {name: post, method: POST, url: `+up.URL+`/hangup}
- {name: get, url: `+up.URL+`/hangup}
- {name: refused, method: POST, url: `+closedURL+`/x}
`)
	const mayHave = "the request was sent, so the server may have done it before the connection broke: check before sending it again"
	for name, want := range map[string]bool{"post": true, "get": false, "refused": false} {
		res := call(t, reg, name, `{}`)
		if !res.IsError || !strings.Contains(text(res), "request failed") || strings.Contains(text(res), mayHave) != want {
			t.Errorf("%s: %q; want an error that says it may have been done: %v", name, text(res), want)
		}
	}
}
