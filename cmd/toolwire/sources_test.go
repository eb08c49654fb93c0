package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"github.com/toolwire/toolwire/sources/remote"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

func TestSourcesConfig(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", `
mcp_servers:
  - name: files
    command: mcp-files
    args: ["--root", "/srv"]
    env: {API_KEY: "{{FILES_KEY}}"}
  - name: search
    url: https://mcp.example/mcp
    headers: {Authorization: "Bearer {{SEARCH_TOKEN}}"}
remotes:
  - name: agent
    target: agents.internal:50051
    ca_file: /etc/toolwire/ca.pem
    token: "{{AGENT_TOKEN}}"
`)
	cfg, _, err := parseServeArgs([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Sources{
		MCPServers: []mcpsource.ServerConfig{
			{Name: "files", Command: "mcp-files", Args: []string{"--root", "/srv"}, Env: map[string]string{"API_KEY": "{{FILES_KEY}}"}},
			{Name: "search", URL: "https://mcp.example/mcp", Headers: map[string]string{"Authorization": "Bearer {{SEARCH_TOKEN}}"}},
		},
		Remotes: []remote.Config{{Name: "agent", Target: "agents.internal:50051", CAFile: "/etc/toolwire/ca.pem", Token: "{{AGENT_TOKEN}}"}},
	}
	if diff := cmp.Diff(want, cfg.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if err := sources.New(reg, nil).Check(t.Context(), cfg.Sources); err != nil {
		t.Errorf("Check: %v", err)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"mcp_servers:\n  - name: x\n", `mcp server "x": set command`},
		{"remotes:\n  - name: r\n    target: tools.example:1\n    insecure: true\n    token: \"{{T}}\"\n", "loopback"},
		{"remotes:\n  - name: r\n    target: h:1\n    tls: true\n", "tls"},
	} {
		path := writeFile(t, "bad.yaml", tc.yaml)
		err := run(context.Background(), []string{"serve", "--no-workspace", "--listen", "127.0.0.1:0", "--config", path}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve with %q: %v; want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

// TestServeSources serves an MCP server's tools and a remote toolwire's
// tools through "toolwire serve".
func TestServeSources(t *testing.T) {
	t.Parallel()
	regB, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	b := loopback.Serve(t, regB, grpcserve.Config{})

	m := mcp.NewServer(&mcp.Implementation{Name: "test"}, nil)
	mcp.AddTool(m, &mcp.Tool{Name: "ping", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
		})
	web := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil))
	t.Cleanup(web.Close)

	path := writeFile(t, "toolwire.yaml", "mcp_servers:\n  - name: m\n    url: "+web.URL+"\nremotes:\n  - name: b\n    target: "+b.Addr+"\n    insecure: true\n")
	s := startServe(t, "--config", path)
	waitFor(t, "the sources' tools", func() bool {
		out := runCmd(t, s.addr, "tools").stdout
		return strings.Contains(out, "m_ping") && strings.Contains(out, "b_echo")
	})
	if got := runCmd(t, s.addr, "call", "m_ping", "{}"); got.stdout != "pong\n" {
		t.Errorf("m_ping: %+v", got)
	}
	if got := runCmd(t, s.addr, "call", "b_echo", `{"text":"via b"}`); got.stdout != "via b\n" {
		t.Errorf("b_echo: %+v", got)
	}
	if err := s.stop(); err != nil {
		t.Errorf("serve: %v", err)
	}
}
