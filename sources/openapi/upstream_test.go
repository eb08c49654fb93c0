package openapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/tools"
)

// upstreamDoc declares GitHub's shapes that GitHub's own answers break:
// repos/get's full repository requires has_discussions, pulls/create's
// requested_teams items require type.
const upstreamDoc = `{"openapi": "3.0.3", "info": {"title": "upstream", "version": "1"},
 "paths": {
  "/repos/{owner}/{repo}": {"get": {"operationId": "repos/get", "parameters": [
    {"name": "owner", "in": "path", "required": true, "schema": {"type": "string"}},
    {"name": "repo", "in": "path", "required": true, "schema": {"type": "string"}}],
   "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/full-repository"}}}}}}},
  "/repos/{owner}/{repo}/pulls": {"post": {"operationId": "pulls/create", "parameters": [
    {"name": "owner", "in": "path", "required": true, "schema": {"type": "string"}},
    {"name": "repo", "in": "path", "required": true, "schema": {"type": "string"}}],
   "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "properties": {"title": {"type": "string"}, "head": {"type": "string"}, "base": {"type": "string"}}, "required": ["head", "base"]}}}},
   "responses": {"201": {"description": "created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/pull-request"}}}}}}},
  "/text": {"get": {"operationId": "text", "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}}}
 },
 "components": {"schemas": {
  "full-repository": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "has_discussions": {"type": "boolean"}}, "required": ["id", "name", "has_discussions"]},
  "team": {"type": "object", "properties": {"name": {"type": "string"}, "type": {"type": "string", "enum": ["enterprise", "organization"]}}, "required": ["name", "type"]},
  "pull-request": {"type": "object", "properties": {"number": {"type": "integer"}, "requested_teams": {"type": "array", "items": {"$ref": "#/components/schemas/team"}}}, "required": ["number"]}
 }}}`

// TestUpstreamAnswers: through the engine, as every surface runs calls,
// an API's answer is never turned into an error. A 2xx answer that does
// not match the operation's output schema is delivered (text and
// structured content) with the mismatch in details; a 201 is not retried
// or reported as a failure; a 2xx answer that is not JSON is its text; an
// error status is an error result with the status and the body. A
// built-in tool's mismatch is still an error: that is toolwire's bug.
func TestUpstreamAnswers(t *testing.T) {
	t.Parallel()
	var pulls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/repos/octo/gone":
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}`)
		case r.URL.Path == "/repos/octo/hello":
			io.WriteString(w, `{"id":1,"name":"hello"}`)
		case r.URL.Path == "/repos/octo/hello/pulls":
			pulls.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"number":42,"requested_teams":[{"name":"core"}]}`)
		case r.URL.Path == "/text":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "all good")
		}
	}))
	defer up.Close()
	spec := writeDoc(t, mustJSON(t, upstreamDoc))
	src, reg, _ := newSource(t)
	if err := src.Sync(t.Context(), []Config{{Name: "gh", Spec: spec, BaseURL: up.URL}}); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	defer eng.Close()
	run := func(name, args string) *toolwirev1.CallResult {
		t.Helper()
		res, err := eng.Call(t.Context(), reg.Snapshot(), &toolwirev1.ToolCall{CallId: "c", Name: name, Arguments: args}, "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	type details struct {
		Status       int      `json:"status"`
		Mismatch     []string `json:"output_schema_mismatch"`
		Unstructured string   `json:"unstructured"`
	}
	read := func(res *toolwirev1.CallResult) details {
		var d details
		if err := json.Unmarshal([]byte(res.GetDetails()), &d); err != nil {
			t.Errorf("details %q: %v", res.GetDetails(), err)
		}
		return d
	}

	res := run("gh_pulls_create", `{"owner":"octo","repo":"hello","title":"t","head":"f","base":"main"}`)
	if d := read(res); res.GetIsError() || res.GetStructuredContent() != `{"number":42,"requested_teams":[{"name":"core"}]}` ||
		d.Status != 201 || len(d.Mismatch) != 1 || !strings.HasPrefix(d.Mismatch[0], "/requested_teams/0: ") || !strings.Contains(d.Mismatch[0], "type") {
		t.Errorf("pulls/create answered 201: %v", res)
	}
	if n := pulls.Load(); n != 1 {
		t.Errorf("the pull request was created %d times", n)
	}
	res = run("gh_repos_get", `{"owner":"octo","repo":"hello"}`)
	if d := read(res); res.GetIsError() || !strings.Contains(res.GetContent()[0].GetText().GetText(), `"name":"hello"`) ||
		len(d.Mismatch) != 1 || !strings.Contains(d.Mismatch[0], "has_discussions") {
		t.Errorf("repos/get without has_discussions: %v", res)
	}
	res = run("gh_text", `{}`)
	if d := read(res); res.GetIsError() || res.GetContent()[0].GetText().GetText() != "all good" || res.GetStructuredContent() != "" || d.Unstructured != "the response is not JSON" {
		t.Errorf("a 200 text answer: %v", res)
	}
	res = run("gh_repos_get", `{"owner":"octo","repo":"gone"}`)
	if d := read(res); !res.GetIsError() || res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR || d.Status != 404 ||
		!strings.Contains(res.GetContent()[0].GetText().GetText(), `HTTP 404 Not Found: {"message":"Not Found"`) {
		t.Errorf("a 404: %v", res)
	}
	if !strings.Contains(logs.String(), `"msg":"upstream result does not match the tool's output schema"`) {
		t.Errorf("no log line says an answer did not match:\n%s", logs)
	}

	// A built-in tool's answer that breaks its own schema is toolwire's
	// bug: an error result, as before.
	own, err := tools.NewRegistry(tools.Tool{Name: "own", OutputSchema: json.RawMessage(`{"type":"object","required":["n"]}`),
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return &tools.Result{StructuredContent: json.RawMessage(`{}`)}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	res, err = eng.Call(t.Context(), own.Snapshot(), &toolwirev1.ToolCall{CallId: "c", Name: "own"}, "")
	if err != nil || !res.GetIsError() || res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR {
		t.Errorf("a built-in tool's mismatch: %v, %v", res, err)
	}
}

func mustJSON(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
