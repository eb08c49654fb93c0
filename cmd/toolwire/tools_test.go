package main

import (
	"encoding/json"
	"strings"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestToolsLargeCatalog: "toolwire tools" lists a catalog larger than a
// gRPC message (1,200 HTTP tools, 5.4 MB of declarations), every tool
// once; it failed with RESOURCE_EXHAUSTED when the server sent the
// listing as one message.
func TestToolsLargeCatalog(t *testing.T) {
	t.Parallel()
	type httpTool struct {
		Name        string          `json:"name"`
		Title       string          `json:"title"`
		Description string          `json:"description"`
		URL         string          `json:"url"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	var cfg struct {
		HTTPTools []httpTool `json:"http_tools"`
	}
	for _, tl := range gencatalog.Light(1200) {
		cfg.HTTPTools = append(cfg.HTTPTools, httpTool{tl.Name, tl.Title, tl.Description, "http://127.0.0.1:9/" + tl.Name, json.RawMessage(`{"type":"object"}`)})
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--config", writeFile(t, "toolwire.yaml", string(b)))
	// The log names the first tools and counts the rest, rather than a
	// line as long as the catalog.
	seen := false
	for line := range strings.Lines(s.stderr.String()) {
		var l struct {
			Msg         string
			Count, More int
			Tools       []string
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "serving tools" {
			continue
		}
		seen = true
		if l.Count < 1200 || len(l.Tools) != loggedToolNames || l.More != l.Count-loggedToolNames || len(line) > 4096 {
			t.Errorf("the serving tools line (%d bytes) does not count and cap the names: count %d, %d named, more %d", len(line), l.Count, len(l.Tools), l.More)
		}
	}
	if !seen {
		t.Error("serve logged no serving tools line")
	}

	got := runCmd(t, s.addr, "tools")
	if got.err != nil {
		t.Fatalf("tools: %v\n%s", got.err, got.stderr)
	}
	if lines := strings.Count(got.stdout, "\n"); lines != 1+1200 {
		t.Errorf("tools printed %d lines, want a header and 1200 tools", lines)
	}
	got = runCmd(t, s.addr, "tools", "--json")
	var resp toolwirev1.ListToolsResponse
	if err := protojson.Unmarshal([]byte(got.stdout), &resp); err != nil || len(resp.GetTools()) != 1200 || resp.GetNextPageToken() != "" {
		t.Errorf("tools --json: %d tools, token %q, %v", len(resp.GetTools()), resp.GetNextPageToken(), err)
	}
}

// TestToolsSearch: "toolwire tools --search" prints the best matches as
// the table (and --json the SearchToolsResponse), says on stderr when
// --max left some out, and refuses --max without --search.
func TestToolsSearch(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")
	got := runCmd(t, s.addr, "tools", "--search", "given message")
	want := "NAME  ANNOTATIONS  DESCRIPTION\nfail  -            Fails with the given message; for testing error handling.\n"
	if got.err != nil || got.stdout != want || got.stderr != "" {
		t.Errorf("--search: %v\nstdout %q\nstderr %q", got.err, got.stdout, got.stderr)
	}
	got = runCmd(t, s.addr, "tools", "--search", "given", "--max", "1")
	if got.err != nil || strings.Count(got.stdout, "\n") != 2 || !strings.Contains(got.stderr, "1 of 3 matching tools") {
		t.Errorf("--search --max 1: %v\nstdout %q\nstderr %q", got.err, got.stdout, got.stderr)
	}
	got = runCmd(t, s.addr, "tools", "--search", "GIVEN", "--json")
	var resp toolwirev1.SearchToolsResponse
	if err := protojson.Unmarshal([]byte(got.stdout), &resp); err != nil || resp.GetTotalMatches() != 3 || len(resp.GetTools()) != 3 {
		t.Errorf("--search --json: %v, %d of %d\n%s", err, len(resp.GetTools()), resp.GetTotalMatches(), got.stdout)
	}
	for _, args := range [][]string{{"tools", "--max", "3"}, {"tools", "--search", "x", "--max", "-1"}} {
		if got := runCmd(t, s.addr, args...); got.code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s", args, got.code, got.stderr)
		}
	}
	if got := runCmd(t, s.addr, "tools", "--search", "  "); got.code == 0 || got.err == nil || !strings.Contains(got.err.Error(), "the query is empty") {
		t.Errorf("an empty query: exit %d, %v", got.code, got.err)
	}
}
