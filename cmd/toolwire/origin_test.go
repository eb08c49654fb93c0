package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolwire/toolwire/service/mcpserve"
)

// writeFileCall is CallTool of write_file in Connect's JSON, the call a
// hostile page would make: it leaves a file behind when it runs.
func writeFileCall(callID, path string) string {
	args, _ := json.Marshal(map[string]string{"path": path, "content": "written by a web page"})
	b, _ := json.Marshal(map[string]any{"call": map[string]any{"callId": callID, "name": "write_file", "arguments": string(args)}})
	return string(b)
}

// writeFileMCP is the same call as an MCP tools/call.
func writeFileMCP(path string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
		"params": map[string]any{"name": "write_file", "arguments": map[string]string{"path": path, "content": "written by a web page"},
			"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": mcpserve.RevisionStateless}}})
	return string(b)
}

// send posts body to the HTTP port at addr with the headers given, Host
// among them, and returns the response and its body.
func send(t *testing.T, method, addr, path, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestServeRefusesWebPages reproduces issue 27's report against a real
// "serve --http-listen 127.0.0.1:…" with the workspace tools and
// authentication off (the README's setup): write_file over Connect with a
// foreign Host and Origin, over /mcp with a foreign Origin, over gRPC-Web,
// the console's AdminService and page, each as a DNS-rebinding page (Host)
// and as a page of another origin (Origin) sends them. Each gets 403 in
// its protocol and no file is written; the same calls without Origin, as
// curl sends them, run.
func TestServeRefusesWebPages(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	s := startServe(t, "--diag", "--workspace", ws, "--http-listen", "127.0.0.1:0")
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	_, port, _ := net.SplitHostPort(addr)
	rebinding := map[string]string{"Host": "evil.example:" + port, "Origin": "http://evil.example:" + port, "Sec-Fetch-Site": "same-origin"}
	crossOrigin := map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}
	with := func(h map[string]string, more map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	jsonCT := map[string]string{"Content-Type": "application/json"}
	mcpCT := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": mcpserve.RevisionStateless, "Mcp-Method": "tools/call", "Mcp-Name": "write_file"}
	for _, page := range []struct {
		name   string
		header map[string]string
		why    string
	}{{"a rebinding page", rebinding, "http_allowed_hosts"}, {"a page of another origin", crossOrigin, "http_cors_origins"}} {
		// Connect's JSON, as the issue sent it.
		resp, body := send(t, "POST", addr, "/toolwire.v1.ToolService/CallTool", writeFileCall("1", "connect.txt"), with(page.header, jsonCT))
		var e struct{ Code, Message string }
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != http.StatusForbidden || e.Code != "permission_denied" || !strings.Contains(e.Message, page.why) {
			t.Errorf("%s, CallTool over Connect: %d %s; want 403 permission_denied naming %s", page.name, resp.StatusCode, body, page.why)
		}
		// MCP: 403 with a JSON-RPC error of no ID, as the MCP spec says.
		resp, body = send(t, "POST", addr, "/mcp", writeFileMCP("mcp.txt"), with(page.header, mcpCT))
		var rpc struct {
			ID    json.RawMessage
			Error struct {
				Code    int64
				Message string
			}
		}
		_ = json.Unmarshal([]byte(body), &rpc)
		if resp.StatusCode != http.StatusForbidden || string(rpc.ID) != "null" || rpc.Error.Code != mcpserve.CodePermissionDenied || !strings.Contains(rpc.Error.Message, page.why) {
			t.Errorf("%s, tools/call over /mcp: %d %s; want 403 and a JSON-RPC error of ID null, code %d", page.name, resp.StatusCode, body, mcpserve.CodePermissionDenied)
		}
		// The GET stream of /mcp.
		resp, body = send(t, "GET", addr, "/mcp", "", with(page.header, map[string]string{"Accept": "text/event-stream"}))
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s, GET /mcp: %d %s; want 403", page.name, resp.StatusCode, body)
		}
		// gRPC-Web, in its protocol.
		resp, _ = send(t, "POST", addr, "/toolwire.v1.ToolService/CallTool", "\x00\x00\x00\x00\x00", with(page.header, map[string]string{"Content-Type": "application/grpc-web+proto"}))
		if resp.Header.Get("Grpc-Status") != "7" {
			t.Errorf("%s, CallTool over gRPC-Web: %d %v; want grpc-status 7 (PERMISSION_DENIED)", page.name, resp.StatusCode, resp.Header)
		}
		// The console's API and, for a rebinding page, the console itself.
		if resp, body := send(t, "POST", addr, "/toolwire.v1.AdminService/GetServerStatus", "{}", with(page.header, jsonCT)); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s, GetServerStatus: %d %s; want 403", page.name, resp.StatusCode, body)
		}
		if resp, body := send(t, "OPTIONS", addr, "/toolwire.v1.ToolService/CallTool", "", with(page.header, map[string]string{"Access-Control-Request-Method": "POST"})); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s, a preflight: %d %s; want 403", page.name, resp.StatusCode, body)
		}
	}
	if resp, body := send(t, "GET", addr, "/console/", "", rebinding); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the console under a rebinding name: %d %.200s; want 403", resp.StatusCode, body)
	}
	for _, name := range []string{"connect.txt", "mcp.txt"} {
		if _, err := os.Stat(filepath.Join(ws, name)); err == nil {
			t.Errorf("a refused page's write_file wrote %s", name)
		}
	}
	// curl, and SDKs, send no Origin: served.
	if resp, body := send(t, "POST", addr, "/toolwire.v1.ToolService/CallTool", writeFileCall("2", "curl.txt"), jsonCT); resp.StatusCode != http.StatusOK || !strings.Contains(body, "Created curl.txt") {
		t.Errorf("curl's CallTool: %d %s", resp.StatusCode, body)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]string{"path": "sdk.txt", "content": "x"}}); err != nil || res.IsError {
		t.Errorf("the MCP SDK's write_file: %v %+v", err, res)
	}
}

// TestServeExposure: serve refuses to put the HTTP port beyond loopback
// with authentication off, naming the way out, before it serves anything;
// --http-allow-unauthenticated (with a warning), tokens, or a loopback
// address let it start.
func TestServeExposure(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--no-workspace", "--diag", "--http-listen", "0.0.0.0:0"}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--http-allow-unauthenticated") || !strings.Contains(err.Error(), "authentication off") {
		t.Errorf("serve --http-listen 0.0.0.0:0 without authentication: %v; want a refusal naming --http-allow-unauthenticated", err)
	}
	tokens := writeFile(t, "tokens", "alice: secret-token-of-alice\n")
	for _, c := range []struct {
		name string
		args []string
		warn bool
	}{
		{"with the opt-in", []string{"--http-listen", "0.0.0.0:0", "--http-allow-unauthenticated"}, true},
		{"with tokens", []string{"--http-listen", "0.0.0.0:0", "--tokens-file", tokens}, false},
		{"on loopback", []string{"--http-listen", "127.0.0.1:0"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startServe(t, append([]string{"--diag"}, c.args...)...)
			waitFor(t, "the HTTP port", func() bool { _, ok := httpAddr(s.stderr.String()); return ok })
			if got := strings.Contains(s.stderr.String(), "authentication off (http_allow_unauthenticated)"); got != c.warn {
				t.Errorf("the warning logged: %v; want %v\n%s", got, c.warn, s.stderr)
			}
		})
	}
}

// TestServeGRPCExposure: the gRPC port holds the same rule as the HTTP
// port. serve refuses to listen beyond loopback (every address form that
// means all interfaces) with authentication off, naming the way out,
// before it serves anything; --allow-unauthenticated or its config key
// (with a warning), tokens, or a loopback name let it start.
func TestServeGRPCExposure(t *testing.T) {
	t.Parallel()
	// Refused before it serves, so a context already ended changes nothing;
	// it stops a serve that wrongly starts at once rather than never.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		var stderr bytes.Buffer
		err := run(ended, []string{"serve", "--listen", addr, "--no-workspace", "--diag"}, io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--allow-unauthenticated") || !strings.Contains(err.Error(), "gRPC port") {
			t.Errorf("serve --listen %s without authentication: %v; want a refusal naming --allow-unauthenticated", addr, err)
		}
	}
	tokens := writeFile(t, "tokens", "alice: secret-token-of-alice\n")
	optIn := writeFile(t, "config.yaml", "allow_unauthenticated: true\n")
	for _, c := range []struct {
		name string
		args []string
		warn bool
	}{
		{"with the opt-in", []string{"--listen", "0.0.0.0:0", "--allow-unauthenticated"}, true},
		{"with the opt-in in the config file", []string{"--config", optIn, "--listen", "0.0.0.0:0"}, true},
		{"with tokens", []string{"--listen", "0.0.0.0:0", "--tokens-file", tokens}, false},
		{"on a loopback name", []string{"--listen", "localhost:0"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startServe(t, append([]string{"--diag"}, c.args...)...)
			if got := strings.Contains(s.stderr.String(), "authentication off (allow_unauthenticated)"); got != c.warn {
				t.Errorf("the warning logged: %v; want %v\n%s", got, c.warn, s.stderr)
			}
		})
	}
}
