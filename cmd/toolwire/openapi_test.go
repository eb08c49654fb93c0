package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/sources/openapi"
)

// TestServeOpenAPI serves an OpenAPI document's operation through "toolwire
// serve --config", calls it with "toolwire call" (lanes, validation and
// all), then edits the document alone: unreadable, the reload is rejected
// with the document's problem and the tool is still served; fixed, its
// new operation replaces the old.
func TestServeOpenAPI(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"greeting":"hello `+r.URL.Query().Get("who")+`"}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	spec := filepath.Join(dir, "api.yaml")
	const doc = `openapi: 3.1.0
info: {title: greeter, version: "1"}
paths:
  /greet:
    get:
      operationId: greet
      summary: Greets someone.
      parameters:
        - {name: who, in: query, required: true, schema: {type: string}}
      responses:
        "200":
          description: the greeting
          content:
            application/json:
              schema: {type: object, properties: {greeting: {type: string}}, required: [greeting]}
`
	if err := os.WriteFile(spec, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "toolwire.yaml")
	cfg := "openapi:\n  - name: greeter\n    spec: " + spec + "\n    base_url: " + up.URL + "\n"
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--config", config)
	got := runCmd(t, s.addr, "call", "greeter_greet", `{"who":"a b"}`)
	if got.err != nil || !strings.Contains(got.stdout, `hello a b`) {
		t.Fatalf("call: %v\n%s%s", got.err, got.stdout, got.stderr)
	}
	if got := runCmd(t, s.addr, "call", "greeter_greet", `{}`); got.code == 0 || !strings.Contains(got.stdout+got.stderr, "who") {
		t.Errorf("a call without the required who: exit %d\n%s%s", got.code, got.stdout, got.stderr)
	}

	// The document is watched: breaking it alone reloads, is rejected
	// with the problem's place, and the tool stays.
	replaceFile(t, spec, strings.Replace(doc, "paths:", "paths:\n  /broken: {get: [", 1))
	waitLog(t, s.stderr, "config reload rejected", "not a YAML or JSON document: yaml: line")
	if got := runCmd(t, s.addr, "call", "greeter_greet", `{"who":"again"}`); got.err != nil || !strings.Contains(got.stdout, "hello again") {
		t.Errorf("after a rejected reload: %v\n%s%s", got.err, got.stdout, got.stderr)
	}
	// Fixed, with the operation renamed: the new tool replaces the old.
	replaceFile(t, spec, strings.Replace(doc, "operationId: greet", "operationId: hello", 1))
	waitFor(t, "greeter_hello after the document changed", func() bool {
		got := runCmd(t, s.addr, "tools")
		return got.code == 0 && strings.Contains(got.stdout, "greeter_hello") && !strings.Contains(got.stdout, "greeter_greet")
	})
}

// TestDocsOpenAPI loads the example of docs/sources.md's OpenAPI section
// against the Petstore document it names, so the documentation stays true.
func TestDocsOpenAPI(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/sources.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## OpenAPI documents\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("no yaml block in the OpenAPI section of docs/sources.md")
	}
	petstore, err := filepath.Abs("../../sources/openapi/testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	block = strings.Replace(block, "/etc/toolwire/petstore.yaml", petstore, 1)
	cfg, _, err := parseServeArgs([]string{"--config", writeFile(t, "toolwire.yaml", block)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.OpenAPI) != 1 {
		t.Fatalf("openapi: %+v", cfg.OpenAPI)
	}
	ts, err := openapi.Load(t.Context(), cfg.OpenAPI[0], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range ts {
		names = append(names, tl.Name)
		if tl.Name == "petstore_getInventory" && (tl.Annotations.ReadOnly || tl.Timeout != 5*time.Second) {
			t.Errorf("getInventory's overrides did not apply: %+v, %v", tl.Annotations, tl.Timeout)
		}
	}
	if !slices.Contains(names, "petstore_getPetById") || slices.Contains(names, "petstore_deletePet") || slices.Contains(names, "petstore_createUser") {
		t.Errorf("tools %v: want include and exclude applied", names)
	}
}
