package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/internal/testing/testoidc"
	"github.com/toolwire/toolwire/service/mcpserve"
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

// TestServeMCPAuthenticates: with tokens configured, /mcp refuses a request
// without valid credentials with 401 (a Connect-style body and a
// WWW-Authenticate challenge), and serves the token's caller the tools its
// permissions allow: the gRPC port's Verifier checks both ports.
func TestServeMCPAuthenticates(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: secret-token-of-alice\n")
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--tokens-file", tokens)
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	for name, header := range map[string]string{"no token": "", "a wrong token": "Bearer nope"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"code":"unauthenticated"`) || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: %s %s %q; want 401 with a challenge and an unauthenticated body", name, resp.Status, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	hc := &http.Client{Transport: bearer{"secret-token-of-alice", http.DefaultTransport}}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	list, err := session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "echo") {
		t.Errorf("alice's tools over /mcp: %q; want the diagnostic tools", names)
	}
}

// TestServeConnect: "serve --http-listen" serves the ToolService on the
// HTTP port: the README's curl line (CallTool, Connect JSON) gets echo's
// result, and toolwire's own gRPC client (grpc-go, h2c) calls through the
// same port; with tokens, a call without one gets 401 and a Connect error.
func TestServeConnect(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: secret-token-of-alice\n")
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--tokens-file", tokens)
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	curl := func(token string) (int, string) {
		resp, body := curlCallTool(t, addr, token)
		return resp.StatusCode, body
	}
	status, body := curl("secret-token-of-alice")
	var got struct {
		Result struct {
			CallID  string `json:"callId"`
			Content []struct {
				Text struct{ Text string } `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || status != http.StatusOK || got.Result.CallID != "1" ||
		len(got.Result.Content) != 1 || got.Result.Content[0].Text.Text != "hi" {
		t.Errorf("the README's curl line: %d %s (%v)", status, body, err)
	}
	if status, body := curl(""); status != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthenticated"`) {
		t.Errorf("without a token: %d %s; want 401 and a Connect unauthenticated error", status, body)
	}
	if got := runCmd(t, addr, "call", "--token", "secret-token-of-alice", "--no-progress", "echo", `{"text":"gRPC on the HTTP port"}`); got.stdout != "gRPC on the HTTP port\n" {
		t.Errorf("toolwire call against the HTTP port: %+v", got)
	}
}

// curlCallTool posts the README's curl line (CallTool of echo "hi" in
// Connect's JSON) to the HTTP port at addr, with a bearer token unless it
// is "", and returns the response and its body.
func curlCallTool(t *testing.T, addr, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/toolwire.v1.ToolService/CallTool",
		strings.NewReader(`{"call":{"callId":"1","name":"echo","arguments":"{\"text\":\"hi\"}"}}`))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// connectClients is the folder of the Node.js Connect clients (npm ci
// there; .ci/run does).
const connectClients = "../../service/connectserve/testdata/tsclient"

// TestServeConnectTypeScript runs service/connectserve/testdata/tsclient/client.mjs
// against "serve --diag --http-listen" with a token: a browser-style fetch
// of CallTool in Connect's JSON (and 401 without the token), and
// @connectrpc/connect's clients over connect-web's fetch transport (JSON)
// and connect-node's gRPC-Web transport: ListTools, CallTool, ExecuteBatch
// streams, a wrong token, an aborted call.
func TestServeConnectTypeScript(t *testing.T) {
	t.Parallel()
	testenv.LookPath(t, "node")
	if _, err := os.Stat(filepath.Join(connectClients, "node_modules", "@connectrpc", "connect-web")); err != nil {
		testenv.Missing(t, "the Node.js clients of the Connect surface (npm ci in service/connectserve/testdata/tsclient)")
	}
	tokens := writeFile(t, "tokens", "alice: secret-token-of-alice\n")
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--tokens-file", tokens, "--log-level", "debug")
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs", "http://"+addr, "secret-token-of-alice")
	cmd.Dir = connectClients
	out, err := cmd.CombinedOutput()
	t.Logf("node client.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node client.mjs: %v", err)
	}
	// The aborted call was cancelled on the server, not left to run.
	waitFor(t, "the aborted call's end", func() bool {
		for line := range strings.Lines(s.stderr.String()) {
			if strings.Contains(line, `"call finished"`) && strings.Contains(line, `"call_id":"s1"`) {
				if !strings.Contains(line, `"outcome":"cancelled"`) {
					t.Errorf("the aborted call: %s", line)
				}
				return true
			}
		}
		return false
	})
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// TestServeOIDC: serve with --oidc-issuer accepts the issuer's JWTs over
// Connect and gRPC, refuses a request without one with 401 naming the
// protected resource metadata, and serves that document naming the
// issuer, for MCP clients.
func TestServeOIDC(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--oidc-issuer", iss.URL, "--oidc-audience", "toolwire")
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	jwt := iss.Token(t, "ec-1", testoidc.Claims{"sub": "agent-9", "aud": "toolwire"})
	post := func(token string) (*http.Response, string) { return curlCallTool(t, addr, token) }
	if resp, body := post(jwt); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"text":"hi"`) {
		t.Errorf("CallTool with a JWT: %d %s", resp.StatusCode, body)
	}
	resp, body := post("")
	metaURL := "http://" + addr + "/.well-known/oauth-protected-resource"
	if want := `Bearer resource_metadata="` + metaURL + `"`; resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
		t.Errorf("without a token: %d %q %s; want 401 with %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body, want)
	}
	meta, err := http.Get(metaURL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(meta.Body)
	meta.Body.Close()
	if !strings.Contains(string(b), `"authorization_servers":["`+iss.URL+`"]`) || !strings.Contains(string(b), `"resource":"http://`+addr+`/mcp"`) {
		t.Errorf("protected resource metadata: %d %s", meta.StatusCode, b)
	}
	if got := runCmd(t, addr, "call", "--token", jwt, "--no-progress", "echo", `{"text":"a JWT over gRPC"}`); got.stdout != "a JWT over gRPC\n" {
		t.Errorf("toolwire call with a JWT: %+v", got)
	}
	if !strings.Contains(s.stderr.String(), `"oidc_issuer":"`+iss.URL+`"`) {
		t.Errorf("the start log does not name the issuer:\n%s", s.stderr.String())
	}
}
