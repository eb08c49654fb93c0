package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var openAIName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// petstore is a small implementation of a few of the Petstore's
// operations, enough to call their tools against.
type petstore struct {
	mu   sync.Mutex
	pets map[int64]map[string]any
	last http.Header // headers of the last request
}

func newPetstore(t *testing.T) *httptest.Server {
	ps := &petstore{pets: map[int64]map[string]any{
		1: {"id": 1, "name": "rex", "photoUrls": []string{}, "status": "available", "tags": []any{map[string]any{"id": 1, "name": "good"}}},
		2: {"id": 2, "name": "tom", "photoUrls": []string{}, "status": "sold", "tags": []any{map[string]any{"id": 2, "name": "cat"}}},
	}}
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /api/v3/pet/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil {
			http.Error(w, "Invalid ID supplied", http.StatusBadRequest)
			return
		}
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.last = r.Header.Clone()
		p, ok := ps.pets[id]
		if !ok {
			http.Error(w, "Pet not found", http.StatusNotFound)
			return
		}
		write(w, p)
	})
	mux.HandleFunc("GET /api/v3/pet/findByStatus", func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		out := []any{}
		for _, id := range []int64{1, 2} {
			if ps.pets[id] != nil && ps.pets[id]["status"] == r.URL.Query().Get("status") {
				out = append(out, ps.pets[id])
			}
		}
		write(w, out)
	})
	mux.HandleFunc("GET /api/v3/pet/findByTags", func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		want := r.URL.Query()["tags"]
		out := []any{}
		for _, id := range []int64{1, 2} {
			p := ps.pets[id]
			if p == nil {
				continue
			}
			for _, tag := range p["tags"].([]any) {
				if slices.Contains(want, tag.(map[string]any)["name"].(string)) {
					out = append(out, p)
					break
				}
			}
		}
		write(w, out)
	})
	mux.HandleFunc("POST /api/v3/pet", func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "Invalid input", http.StatusBadRequest)
			return
		}
		ps.mu.Lock()
		defer ps.mu.Unlock()
		id := int64(len(ps.pets) + 1)
		p["id"] = id
		ps.pets[id] = p
		write(w, p)
	})
	mux.HandleFunc("DELETE /api/v3/pet/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if r.Header.Get("api_key") != "special-key" {
			http.Error(w, "Invalid pet value", http.StatusBadRequest)
			return
		}
		delete(ps.pets, id)
	})
	mux.HandleFunc("GET /api/v3/store/inventory", func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.last = r.Header.Clone()
		inv := map[string]int{}
		for _, p := range ps.pets {
			inv[p["status"].(string)]++
		}
		write(w, inv)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// call runs a tool as the engine does: arguments validated against the
// input schema, the handler, structured content against the output schema.
func call(t *testing.T, reg *tools.Registry, name, args string) *tools.Result {
	t.Helper()
	tl, ok := reg.Snapshot().Lookup(name)
	if !ok {
		t.Fatalf("no tool %s; tools are %v", name, reg.Snapshot().Names())
	}
	if _, err := tl.ValidateArguments(args); err != nil {
		t.Fatalf("%s(%s): arguments refused: %v", name, args, err)
	}
	res, err := tl.Handler(t.Context(), tools.NewCall("c", name, json.RawMessage(args), nil))
	if err != nil {
		t.Fatalf("%s(%s): %v", name, args, err)
	}
	if len(res.StructuredContent) > 0 && !res.IsError {
		if err := tl.ValidateOutput(res.StructuredContent); err != nil {
			t.Errorf("%s(%s): structured content %s fails the output schema: %v", name, args, res.StructuredContent, err)
		}
	}
	return res
}

func text(res *tools.Result) string {
	var b strings.Builder
	for _, c := range res.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func newSource(t *testing.T) (*Source, *tools.Registry, *logbuf.Buffer) {
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	src := New(reg, slog.New(slog.NewJSONHandler(logs, nil)))
	t.Cleanup(func() { src.Close() })
	return src, reg, logs
}

// TestPetstore serves the Swagger Petstore v3 document's operations as
// tools and calls a few against a real server implementing them.
func TestPetstore(t *testing.T) {
	t.Setenv("TW_PETSTORE_KEY", "special-key")
	srv := newPetstore(t)
	src, reg, logs := newSource(t)
	cfg := Config{
		Name: "petstore", Spec: "testdata/petstore.yaml", BaseURL: srv.URL + "/api/v3",
		Headers:    map[string]string{"X-Api-Key": "{{TW_PETSTORE_KEY}}"},
		Exclude:    []string{"*User*", "logoutUser"},
		Operations: map[string]Override{"DELETE /pet/{petId}": {Description: "Removes a pet for good."}, "getInventory": {ReadOnly: new(false)}},
	}
	if err := src.Check(t.Context(), []Config{cfg}); err != nil {
		t.Fatal(err)
	}
	if err := src.Sync(t.Context(), []Config{cfg}); err != nil {
		t.Fatal(err)
	}
	want := []string{"petstore_addPet", "petstore_deleteOrder", "petstore_deletePet", "petstore_findPetsByStatus",
		"petstore_findPetsByTags", "petstore_getInventory", "petstore_getOrderById", "petstore_getPetById",
		"petstore_placeOrder", "petstore_updatePet", "petstore_updatePetWithForm"}
	if diff := cmp.Diff(want, reg.Snapshot().Names()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), `"operation":"POST /pet/{petId}/uploadImage","reason":"the request body is application/octet-stream, which toolwire does not send`) {
		t.Errorf("no log line says uploadFile was skipped:\n%s", logs)
	}
	if !strings.Contains(logs.String(), `"msg":"OpenAPI document loaded","openapi":"petstore","operations":19,"tools":11,"excluded":7,"skipped":1,"skipped_because":{"request_body":1}`) {
		t.Errorf("no summary line says 11 of 19 operations are tools, 7 excluded, 1 skipped:\n%s", logs)
	}

	get, _ := reg.Snapshot().Lookup("petstore_getPetById")
	if !get.Annotations.ReadOnly || get.Annotations.Destructive || !strings.HasPrefix(get.Description, "Find pet by ID.") {
		t.Errorf("getPetById: %+v", get)
	}
	if inv, _ := reg.Snapshot().Lookup("petstore_getInventory"); inv.Annotations.ReadOnly {
		t.Error("getInventory's read_only override did not apply")
	}
	if del, _ := reg.Snapshot().Lookup("petstore_deletePet"); del.Description != "Removes a pet for good." || !del.Annotations.Destructive || del.Annotations.ReadOnly {
		t.Errorf("deletePet: %+v", del.Annotations)
	}
	var in struct {
		Properties map[string]json.RawMessage
		Required   []string
	}
	add, _ := reg.Snapshot().Lookup("petstore_addPet")
	if err := json.Unmarshal(add.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"name", "photoUrls"}, in.Required); diff != "" || in.Properties["category"] == nil {
		t.Errorf("addPet's input schema %s: the body's properties and required names should be merged in (-want +got):\n%s", add.InputSchema, diff)
	}

	res := call(t, reg, "petstore_getPetById", `{"petId":1}`)
	if res.IsError || !strings.Contains(string(res.StructuredContent), `"name":"rex"`) {
		t.Errorf("getPetById(1): %s / %s", text(res), res.StructuredContent)
	}
	if got := srvHeader(t, srv, reg); got != "special-key" {
		t.Errorf("X-Api-Key: %q; want the environment's value", got)
	}
	if res := call(t, reg, "petstore_getPetById", `{"petId":99}`); !res.IsError || !strings.Contains(text(res), "HTTP 404 Not Found: Pet not found") {
		t.Errorf("getPetById(99): %s", text(res))
	}
	if _, err := get.ValidateArguments(`{"petId":"one"}`); err == nil {
		t.Error(`getPetById accepts {"petId":"one"}`)
	}
	if res := call(t, reg, "petstore_findPetsByStatus", `{"status":"sold"}`); res.IsError || !strings.Contains(text(res), `"tom"`) || strings.Contains(text(res), `"rex"`) {
		t.Errorf("findPetsByStatus(sold): %s", text(res))
	}
	if res := call(t, reg, "petstore_findPetsByTags", `{"tags":["cat","good"]}`); res.IsError || !strings.Contains(text(res), `"tom"`) || !strings.Contains(text(res), `"rex"`) {
		t.Errorf("findPetsByTags(cat, good): %s", text(res))
	}
	res = call(t, reg, "petstore_addPet", `{"name":"fido","photoUrls":["http://x/1.png"],"status":"pending","category":{"id":1,"name":"Dogs"}}`)
	if res.IsError || !strings.Contains(string(res.StructuredContent), `"fido"`) || !strings.Contains(string(res.StructuredContent), `"id":3`) {
		t.Errorf("addPet: %s", text(res))
	}
	if res := call(t, reg, "petstore_deletePet", `{"petId":3,"api_key":"wrong"}`); !res.IsError {
		t.Errorf("deletePet with the wrong api_key header: %s", text(res))
	}
	if res := call(t, reg, "petstore_deletePet", `{"petId":3,"api_key":"special-key"}`); res.IsError || text(res) != "HTTP 200 OK" {
		t.Errorf("deletePet: %s", text(res))
	}
	if res := call(t, reg, "petstore_getPetById", `{"petId":3}`); !res.IsError {
		t.Errorf("the deleted pet is still there: %s", text(res))
	}
	if res := call(t, reg, "petstore_getInventory", `{}`); res.IsError || string(res.StructuredContent) != `{"available":1,"sold":1}`+"\n" {
		t.Errorf("getInventory: %q", res.StructuredContent)
	}
}

// srvHeader is the X-Api-Key of the server's last GET of a pet or the
// inventory.
func srvHeader(t *testing.T, srv *httptest.Server, reg *tools.Registry) string {
	t.Helper()
	got := make(chan string, 1)
	old := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Api-Key")
		io.WriteString(w, `{}`)
	})
	defer func() { srv.Config.Handler = old }()
	call(t, reg, "petstore_getInventory", `{}`)
	return <-got
}

// seen is what the tricky document's server echoes.
type seen struct {
	Method    string  `json:"method"`
	URI       string  `json:"uri"`
	RequestID *string `json:"request_id"`
	Body      any     `json:"body,omitempty"`
}

func echoServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{Method: r.Method, URI: r.RequestURI}
		if id := r.Header.Get("X-Request-Id"); id != "" {
			s.RequestID = &id
		}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			json.Unmarshal(b, &s.Body)
		}
		switch {
		case r.Method == http.MethodPut || r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
			return
		case strings.HasPrefix(r.URL.Path, "/base/dogs"):
			w.Header().Set("Content-Type", "application/json")
			body := s.Body.(map[string]any)
			body["id"] = 7
			json.NewEncoder(w).Encode(body)
			return
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
		}
		json.NewEncoder(w).Encode(s)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestTricky loads a document of $ref cycles, allOf and oneOf, array query
// parameters, escaped path parameters, a header parameter, a 204 and
// names that must be shortened, and calls its tools.
func TestTricky(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	ts, err := Load(t.Context(), Config{Name: "tricky", Spec: "testdata/tricky.yaml", BaseURL: srv.URL + "/base"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	names := reg.Snapshot().Names()
	for _, n := range names {
		if !openAIName.MatchString(n) {
			t.Errorf("%q is not a valid OpenAI function name", n)
		}
	}
	for _, n := range []string{"tricky_getFile", "tricky_putTree", "tricky_addShape", "tricky_addDog", "tricky_get_item"} {
		if !slices.Contains(names, n) {
			t.Errorf("no tool %s in %v", n, names)
		}
	}
	var hashed []string
	for _, n := range names {
		if regexp.MustCompile(`_[0-9a-f]{8}$`).MatchString(n) {
			hashed = append(hashed, n)
		}
	}
	// get_item collides with get.item once sanitized; the long path and
	// the long operationId are cut.
	if len(hashed) != 3 || len(names) != 8 {
		t.Errorf("tools %v: want 8, three of them shortened or told apart with a hash (got %v)", names, hashed)
	}
	again, _ := Load(t.Context(), Config{Name: "tricky", Spec: "testdata/tricky.yaml", BaseURL: srv.URL + "/base"}, nil, nil)
	var againNames []string
	for _, tl := range again {
		againNames = append(againNames, tl.Name)
	}
	if !slices.Equal(slices.Sorted(slices.Values(againNames)), names) {
		t.Errorf("names differ between loads: %v, %v", names, againNames)
	}

	res := call(t, reg, "tricky_getFile", `{"path":"a/b c/d..","tag":["x y","z&w"],"ids":[1,2],"X-Request-Id":"r1"}`)
	var s seen
	if err := json.Unmarshal(res.StructuredContent, &s); err != nil {
		t.Fatalf("getFile: %s (%v)", text(res), err)
	}
	// ids is form without explode: its values joined by a comma, which
	// is the style's delimiter and so not escaped.
	if s.URI != "/base/files/a%2Fb%20c%2Fd..?tag=x+y&tag=z%26w&ids=1,2" || s.RequestID == nil || *s.RequestID != "r1" {
		t.Errorf("getFile sent %s with request id %v", s.URI, s.RequestID)
	}
	if res := call(t, reg, "tricky_getFile", `{"path":".."}`); !res.IsError || !strings.Contains(text(res), `argument "path": the URL path segment it fills reads ".."`) {
		t.Errorf("getFile(..): %s; want it refused", text(res))
	}

	// The recursive Node is unrolled twice, then any value.
	put, _ := reg.Snapshot().Lookup("tricky_putTree")
	if !strings.Contains(string(put.InputSchema), `"children":{"items":{"properties":{"children":{"items":{}`) {
		t.Errorf("putTree's schema does not cut the cycle where stated: %s", put.InputSchema)
	}
	if res := call(t, reg, "tricky_putTree", `{"id":5,"name":"root","children":[{"name":"leaf","children":[{"name":"deeper","anything":1}]}]}`); res.IsError || text(res) != "HTTP 204 No Content" {
		t.Errorf("putTree: %s", text(res))
	}
	if _, err := put.ValidateArguments(`{"id":5,"children":[]}`); err == nil {
		t.Error("putTree accepts a tree without the required name")
	}

	shape, _ := reg.Snapshot().Lookup("tricky_addShape")
	if _, err := shape.ValidateArguments(`{"body":{"kind":"circle","side":1}}`); err == nil {
		t.Error("addShape accepts a circle with a side: oneOf is not applied")
	}
	res = call(t, reg, "tricky_addShape", `{"body":{"kind":"circle","radius":2.5}}`)
	if err := json.Unmarshal(res.StructuredContent, &s); err != nil || s.Method != "POST" || !cmp.Equal(s.Body, map[string]any{"kind": "circle", "radius": 2.5}) {
		t.Errorf("addShape: %s", text(res))
	}

	dog, _ := reg.Snapshot().Lookup("tricky_addDog")
	if _, err := dog.ValidateArguments(`{"name":"rex"}`); err == nil {
		t.Errorf("addDog accepts a dog without bark: allOf's required are not merged: %s", dog.InputSchema)
	}
	if strings.Contains(string(dog.InputSchema), `"id"`) {
		t.Errorf("addDog's input schema has the readOnly id: %s", dog.InputSchema)
	}
	if res := call(t, reg, "tricky_addDog", `{"name":"rex","bark":"loud"}`); res.IsError || !strings.Contains(string(res.StructuredContent), `"id":7`) {
		t.Errorf("addDog: %s", text(res))
	}
	if res := call(t, reg, "tricky_get_item", `{"a.b":"x"}`); res.IsError || !strings.Contains(text(res), `/base/names/x`) {
		t.Errorf("get.item: %s", text(res))
	}
}

// TestVersions loads the same kind of operation from OpenAPI 3.0 (the
// Petstore), 3.1 (tricky) and Swagger 2.0 (converted) and calls the 2.0
// one.
func TestVersions(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": r.URL.Path, "name": r.Method + " " + r.URL.RawQuery + " " + string(b)})
	}))
	defer srv.Close()
	ts, err := Load(t.Context(), Config{Name: "legacy", Spec: "testdata/swagger2.yaml", BaseURL: srv.URL + "/v1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := tools.NewRegistry(ts...)
	if diff := cmp.Diff([]string{"legacy_getItem", "legacy_putItem"}, reg.Snapshot().Names()); diff != "" {
		t.Fatalf("tools (-want +got):\n%s", diff)
	}
	res := call(t, reg, "legacy_getItem", `{"id":"a b","fields":["x","y"]}`)
	if res.IsError || !strings.Contains(string(res.StructuredContent), `"name":"GET fields=x\u0026fields=y "`) {
		t.Errorf("getItem: %s", res.StructuredContent)
	}
	// The body has a property named like the path parameter id, so it is
	// the argument body rather than merged.
	res = call(t, reg, "legacy_putItem", `{"id":"1","body":{"id":"1","name":"n","count":7}}`)
	if res.IsError || !strings.Contains(string(res.StructuredContent), `"name":"PUT  {\"count\":7,\"id\":\"1\",\"name\":\"n\"}"`) {
		t.Errorf("putItem: %s", res.StructuredContent)
	}
	// Without base_url, Swagger 2.0's host and basePath are the server.
	ts, err = Load(t.Context(), Config{Name: "legacy", Spec: "testdata/swagger2.yaml"}, nil, nil)
	if err != nil || len(ts) != 2 {
		t.Fatalf("without base_url: %v, %d tools", err, len(ts))
	}
}

// TestBroken: a document that cannot be read at all is an error naming
// the entry, the spec and where the problem is.
func TestBroken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"yaml syntax", "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get: [\n", []string{"line"}},
		{"json syntax", "{\"openapi\": \"3.0.3\",\n \"paths\": {\"/a\": {\"get\": {\"summary\": \"x}}}}\n", []string{"not a JSON document: line 3, column 1"}},
		{"old swagger", "swagger: '1.2'\n", []string{`swagger "1.2"`}},
		{"not openapi", "hello: world\n", []string{"want an OpenAPI 3.0 or 3.1 document"}},
		{"not an object", "[1, 2]\n", []string{"not an object"}},
		{"no paths", "openapi: 3.1.0\ninfo: {title: x, version: '1'}\n", []string{"no paths"}},
		{"no server", "openapi: 3.1.0\ninfo: {title: x, version: '1'}\npaths: {/a: {get: {responses: {'200': {description: ok}}}}}\n", []string{"names no servers; set base_url"}},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
		if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		base := "http://127.0.0.1:9"
		if tc.name == "no server" {
			base = ""
		}
		_, err := Load(t.Context(), Config{Name: "b", Spec: path, BaseURL: base}, nil, nil)
		if err == nil {
			t.Errorf("%s: loaded", tc.name)
			continue
		}
		for _, w := range append(tc.want, `openapi "b": spec `+path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", tc.name, err, w)
			}
		}
	}
	if _, err := Load(t.Context(), Config{Name: "b", Spec: filepath.Join(dir, "absent.yaml")}, nil, nil); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("an absent file: %v", err)
	}
	if _, err := Load(t.Context(), Config{Name: "b", Spec: "testdata/petstore.yaml", Operations: map[string]Override{"getPetByID": {}}}, nil, nil); err == nil || !strings.Contains(err.Error(), `operations "getPetByID"`) {
		t.Errorf("an override of no operation: %v", err)
	}
	if _, err := Load(t.Context(), Config{Name: "b", Spec: "testdata/tricky.yaml", BaseURL: "ftp://x"}, nil, nil); err == nil || !strings.Contains(err.Error(), "base_url") {
		t.Errorf("an ftp base_url: %v", err)
	}
}

// TestSpecCredentialsHidden: a spec URL may carry credentials (the
// document is fetched with them, as basic auth), and no error about the
// document, its fetch or the URL itself shows them.
func TestSpecCredentialsHidden(t *testing.T) {
	t.Parallel()
	const user, secret = "docs", "s3cret-token"
	var authorized sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok && u == user && p == secret {
			authorized.Store(r.URL.Path, true)
		}
		switch r.URL.Path {
		case "/broken.yaml":
			io.WriteString(w, "openapi: 3.1.0\ninfo: {title: x, version: '1'}\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	withCreds := strings.Replace(srv.URL, "http://", "http://"+user+":"+secret+"@", 1)
	for _, tc := range []struct{ spec, want string }{
		{withCreds + "/missing.yaml", "HTTP 404"},
		{withCreds + "/broken.yaml", "no paths"},
		{"http://" + user + ":" + secret + "@[::1/x.yaml", "want a file path or an absolute http or https URL"},
	} {
		_, err := Load(t.Context(), Config{Name: "private", Spec: tc.spec, BaseURL: "http://127.0.0.1:9"}, nil, nil)
		if err == nil {
			t.Fatalf("%s: loaded", tc.spec)
		}
		if msg := err.Error(); strings.Contains(msg, secret) || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "xxxxx@") {
			t.Errorf("Load(%s) = %q: want it to say %q, with the credentials masked", tc.spec, msg, tc.want)
		}
	}
	for _, path := range []string{"/missing.yaml", "/broken.yaml"} {
		if _, ok := authorized.Load(path); !ok {
			t.Errorf("GET %s did not carry the URL's credentials", path)
		}
	}
}

// TestReload: a document served over HTTP and re-read on every Sync; when
// it breaks, the previous tools stay and the error says where, and the
// next good version replaces them in one update.
func TestReload(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	const good = "openapi: 3.0.3\ninfo: {title: x, version: '1'}\nservers: [{url: /api}]\npaths:\n  /a:\n    get: {operationId: first, responses: {'200': {description: ok}}}\n"
	doc := good
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(w, doc)
	}))
	defer srv.Close()
	set := func(d string) {
		mu.Lock()
		doc = d
		mu.Unlock()
	}
	src, reg, _ := newSource(t)
	cfgs := []Config{{Name: "live", Spec: srv.URL + "/openapi.yaml"}}
	if err := src.Sync(t.Context(), cfgs); err != nil {
		t.Fatal(err)
	}
	if got := reg.Snapshot().Names(); !slices.Equal(got, []string{"live_first"}) {
		t.Fatalf("tools %v", got)
	}
	// The relative server URL resolves against the document's own.
	if tl, _ := reg.Snapshot().Lookup("live_first"); tl != nil {
		res, _ := tl.Handler(t.Context(), tools.NewCall("c", "live_first", nil, nil))
		if !strings.Contains(string(res.Details), `"url":"`+srv.URL+`/api/a"`) {
			t.Errorf("the call went to %s", res.Details)
		}
	}
	rev := reg.Snapshot().Revision()
	set("openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get: {operationId: second, responses: {'200': [\n")
	if err := src.Check(t.Context(), cfgs); err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("Check of a broken document: %v", err)
	}
	if err := src.Sync(t.Context(), cfgs); err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("Sync of a broken document: %v", err)
	}
	if got := reg.Snapshot(); !slices.Equal(got.Names(), []string{"live_first"}) || got.Revision() != rev {
		t.Errorf("after a broken document: %v (revision changed: %v); want the previous tools", got.Names(), got.Revision() != rev)
	}
	set(strings.ReplaceAll(good, "first", "second"))
	if err := src.Sync(t.Context(), cfgs); err != nil {
		t.Fatal(err)
	}
	if got := reg.Snapshot().Names(); !slices.Equal(got, []string{"live_second"}) {
		t.Errorf("after a good document: %v", got)
	}
	if err := src.Sync(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := reg.Snapshot().Len(); got != 0 {
		t.Errorf("after the entry went: %v", reg.Snapshot().Names())
	}
}

// TestCancel: the call's context reaches the request.
func TestCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(gone)
	}))
	defer srv.Close()
	ts, err := Load(t.Context(), Config{Name: "c", Spec: "testdata/swagger2.yaml", BaseURL: srv.URL, Include: []string{"GET /items/*"}}, nil, nil)
	if err != nil || len(ts) != 1 {
		t.Fatalf("%v, %d tools", err, len(ts))
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := ts[0].Handler(ctx, tools.NewCall("c", ts[0].Name, []byte(`{"id":"x"}`), nil))
		errc <- err
	}()
	sourcetest.Wait(t, arrived, "the request")
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Errorf("a cancelled call returned %v; want context.Canceled", err)
	}
	sourcetest.Wait(t, gone, "the server to see the request cancelled")
}

// TestNameTaken: an operation whose tool name another tool holds is held
// back with a log line; the document's other tools are served.
func TestNameTaken(t *testing.T) {
	t.Parallel()
	nop := func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text("built-in"), nil }
	reg, err := tools.NewRegistry(tools.Tool{Name: "legacy_getItem", Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	src := New(reg, slog.New(slog.NewJSONHandler(logs, nil)))
	defer src.Close()
	if err := src.Sync(t.Context(), []Config{{Name: "legacy", Spec: "testdata/swagger2.yaml"}}); err != nil {
		t.Fatal(err)
	}
	if got := reg.Snapshot().Names(); !slices.Equal(got, []string{"legacy_getItem", "legacy_putItem"}) {
		t.Errorf("tools %v", got)
	}
	if tl, _ := reg.Snapshot().Lookup("legacy_getItem"); tl.Source != tools.SourceBuiltin {
		t.Errorf("legacy_getItem is %v; want the built-in kept", tl.Source)
	}
	if !strings.Contains(logs.String(), `"msg":"skipping OpenAPI tool: the name is taken by another tool","openapi":"legacy","tool":"legacy_getItem","owner":"builtin"`) {
		t.Errorf("no line says legacy_getItem is held back:\n%s", logs)
	}
}

// TestReloadOnce: a reload (Check, then Sync) parses a changed document
// once, and one whose document and entry did not change not at all: the
// tools, their revision and the log stay as they are.
func TestReloadOnce(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(t.TempDir(), "api.yaml")
	const doc = "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get: {operationId: first, responses: {'200': {description: ok}}}\n"
	if err := os.WriteFile(spec, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	src, reg, logs := newSource(t)
	cfgs := []Config{{Name: "r", Spec: spec, BaseURL: "http://127.0.0.1:9"}}
	reload := func() {
		t.Helper()
		if err := src.Check(t.Context(), cfgs); err != nil {
			t.Fatal(err)
		}
		if err := src.Sync(t.Context(), cfgs); err != nil {
			t.Fatal(err)
		}
	}
	reload()
	if n := src.loads.Load(); n != 1 {
		t.Errorf("the first reload parsed the document %d times; want once", n)
	}
	rev, lines := reg.Snapshot().Revision(), strings.Count(logs.String(), "\n")
	reload()
	reload()
	if n := src.loads.Load(); n != 1 || reg.Snapshot().Revision() != rev || strings.Count(logs.String(), "\n") != lines {
		t.Errorf("unchanged reloads parsed %d times in all, revision changed %v, log:\n%s", n, reg.Snapshot().Revision() != rev, logs)
	}
	// The entry changed, not the document: built again, once.
	cfgs[0].Exclude = []string{"nothing"}
	reload()
	if n := src.loads.Load(); n != 2 {
		t.Errorf("a changed entry: %d parses in all; want 2", n)
	}
	if err := os.WriteFile(spec, []byte(strings.ReplaceAll(doc, "first", "second")), 0o600); err != nil {
		t.Fatal(err)
	}
	reload()
	if n := src.loads.Load(); n != 3 || !slices.Equal(reg.Snapshot().Names(), []string{"r_second"}) {
		t.Errorf("a changed document: %d parses in all, tools %v", n, reg.Snapshot().Names())
	}
}

// TestDocumentNotARegularFile: a named pipe (with no writer) or a directory
// where the document was is an error at once, as an absent file is; the
// pipe blocked Load, and with it a reload (and serve's shutdown behind it),
// for good.
func TestDocumentNotARegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "doc.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A writer lets a Load blocked on the pipe go when the test ends, so
	// that the test fails rather than hangs.
	defer func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	}()
	for _, spec := range []string{fifo, dir} {
		done := make(chan error, 1)
		go func() {
			_, err := Load(t.Context(), Config{Name: "b", Spec: spec, BaseURL: "http://127.0.0.1:9"}, nil, nil)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), spec) {
				t.Errorf("Load of %s: %v; want an error naming it, not a regular file", spec, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Load of %s did not return", spec)
		}
	}
}

// TestDocumentTooLarge: a document file past maxDocumentBytes is refused,
// from a file as from a URL, saying so.
func TestDocumentTooLarge(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte{' '}, maxDocumentBytes+1)
	file := filepath.Join(t.TempDir(), "doc.yaml")
	if err := os.WriteFile(file, big, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(big) }))
	defer srv.Close()
	for _, spec := range []string{file, srv.URL} {
		if _, err := read(t.Context(), srv.Client(), spec); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("read of %s: %v; want larger than %d bytes", spec, err, maxDocumentBytes)
		}
	}
	small := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(small, big[:100], 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := read(t.Context(), srv.Client(), small); err != nil || len(b) != 100 {
		t.Errorf("a small document: %d bytes, %v", len(b), err)
	}
}

// TestYAML12: a document is read as YAML 1.2, as OpenAPI says documents
// are written. Read as YAML 1.1 (sigs.k8s.io/yaml), the parameter named y
// was false and its operation skipped ("a parameter has no name"), an
// enum of on and off was true and false, and the unquoted version 2.0 was
// the number 2, refused.
func TestYAML12(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	ts, err := Load(t.Context(), Config{Name: "plot", Spec: "testdata/yaml12.yaml", BaseURL: srv.URL}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	tool, ok := reg.Snapshot().Lookup("plot_getPoint")
	if !ok {
		t.Fatalf("no tool plot_getPoint: %v", reg.Snapshot().Names())
	}
	var schema struct {
		Properties map[string]struct {
			Enum    []any `json:"enum"`
			Maximum any   `json:"maximum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"yes", "no"}, schema.Properties["n"].Enum); diff != "" {
		t.Errorf("n's enum (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{"on", "off"}, schema.Properties["light"].Enum); diff != "" {
		t.Errorf("light's enum, merged from an anchor (-want +got):\n%s", diff)
	}
	if got := schema.Properties["x"].Maximum; got != float64(16) {
		t.Errorf("x's maximum, 0x10: %v", got)
	}
	res := call(t, reg, "plot_getPoint", `{"x":3,"y":4,"n":"no","light":"on"}`)
	if res.IsError || !strings.Contains(text(res), `/point?x=3\u0026y=4\u0026n=no\u0026light=on`) {
		t.Errorf("getPoint: %s", text(res))
	}
	// What JSON cannot hold is refused, saying where.
	var tree any
	if err := decodeYAML([]byte("openapi: 3.1.0\nx: .inf\n"), &tree); err == nil || !strings.Contains(err.Error(), "line 2: .inf is not a number JSON can hold") {
		t.Errorf(".inf: %v", err)
	}
}

// TestYAMLAliasBombs: a document whose aliases name aliases ("billion
// laughs": 879 bytes that expand to 10^10 values) is refused before
// anything reads it; read, it took serve past 4 GB. So is one whose alias
// names a value containing it. Aliases that expand it within
// maxExpandedValues are read as before.
func TestYAMLAliasBombs(t *testing.T) {
	t.Parallel()
	doc := func(levels int) []byte {
		var b strings.Builder
		b.WriteString("openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {/x: {get: {operationId: getX, responses: {'200': {description: ok}}}}}\nx-laughs:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
		for i := 1; i <= levels; i++ {
			fmt.Fprintf(&b, "  a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
		}
		return []byte(b.String())
	}
	if _, err := parse(doc(5)); err != nil { // 10^6 values expanded
		t.Errorf("a document of 10^6 values expanded: %v", err)
	}
	if _, err := parse(doc(9)); err == nil || !strings.Contains(err.Error(), "aliases (*name) expand it to more than 4194304 values") {
		t.Errorf("a document of 10^10 values expanded: %v", err)
	}
	cycle := "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {/x: {get: {operationId: getX, responses: {'200': {description: ok}}}}}\nx-s: &s {type: object, properties: {a: *s, b: *s}}\n"
	if _, err := parse([]byte(cycle)); err == nil || !strings.Contains(err.Error(), "line 4: the alias *s names a value that contains it") {
		t.Errorf("an alias inside what it names: %v", err)
	}
}

// TestSlowDocumentIsLogged: a document still being read from its URL
// after a while is logged, once, naming the entry, its URL without
// credentials and how long the read may take; start and reload waited
// for it (up to 30 s) saying nothing. A quick one is not.
func TestSlowDocumentIsLogged(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow.yaml" {
			<-release
		}
		io.WriteString(w, "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get: {operationId: first, responses: {'200': {description: ok}}}\n")
	}))
	defer srv.Close()
	defer close(release)
	src, _, logs := newSource(t)
	src.slowAfter = 20 * time.Millisecond
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("user", "secret")
	done := make(chan error, 1)
	go func() {
		done <- src.Check(t.Context(), []Config{{Name: "slow", Spec: u.String() + "/slow.yaml", BaseURL: srv.URL}})
	}()
	deadline := testenv.Deadline(t)
	for !strings.Contains(logs.String(), "still reading an OpenAPI document") {
		if time.Now().After(deadline) {
			t.Fatalf("no line said the document was slow:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	line := logs.String()
	for _, want := range []string{`"openapi":"slow"`, `"gives_up_after":"30s"`, "/slow.yaml"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line says nothing of %s:\n%s", want, line)
		}
	}
	if strings.Contains(line, "secret") {
		t.Errorf("the line shows the URL's password:\n%s", line)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	quick, _, quickLogs := newSource(t)
	quick.slowAfter = time.Hour
	if err := quick.Check(t.Context(), []Config{{Name: "quick", Spec: srv.URL + "/quick.yaml", BaseURL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(quickLogs.String(), "still reading") {
		t.Errorf("a quick document was logged as slow:\n%s", quickLogs)
	}
}
