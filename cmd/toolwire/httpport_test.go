package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/mcpserve"
)

// httpAddr returns the address in the HTTP port's listening line.
func httpAddr(log string) (string, bool) {
	for line := range strings.Lines(log) {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "toolwire HTTP port listening on ") {
			return rec.Addr, true
		}
	}
	return "", false
}

// TestServeMCP: "serve --http-listen" serves /mcp beside gRPC, on the same
// engine and tools, at both revisions, and /healthz; serve still stops
// cleanly.
func TestServeMCP(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0")
	var addr string
	waitFor(t, "the HTTP port's listening line", func() bool {
		var ok bool
		addr, ok = httpAddr(s.stderr.String())
		return ok
	})
	for _, rev := range []string{mcpserve.RevisionStateless, mcpserve.RevisionSessions} {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: rev})
		if err != nil {
			t.Fatalf("%s: %v", rev, err)
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over MCP"}})
		if err != nil || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "over MCP" {
			t.Errorf("%s: echo: %v %+v", rev, err, res)
		}
		cs.Close()
	}
	// The gRPC port serves the same tools.
	if got := runCmd(t, s.addr, "call", "echo", `{"text":"over gRPC"}`); got.stdout != "over gRPC\n" {
		t.Errorf("gRPC call: %+v", got)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("/healthz: %s %q", resp.Status, body)
	}
	if err := s.stop(); err != nil {
		t.Errorf("serve: %v", err)
	}
}

// TestServeMCPRefusesWithAuth: with tokens configured, serve refuses /mcp
// (it cannot authenticate yet) unless --no-mcp says to serve none.
func TestServeMCPRefusesWithAuth(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: secret-token-of-alice\n")
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var stderr syncBuffer
	err := run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--no-workspace", "--http-listen", "127.0.0.1:0", "--tokens-file", tokens}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "/mcp cannot authenticate") {
		t.Errorf("serve with tokens and /mcp: %v, want a refusal", err)
	}
	s := startServe(t, "--http-listen", "127.0.0.1:0", "--tokens-file", tokens, "--no-mcp")
	waitFor(t, "the HTTP port", func() bool { _, ok := httpAddr(s.stderr.String()); return ok })
}
