package mcpserve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/service/mcpserve"
)

// TestSurface runs the behaviour suite every surface passes against /mcp,
// once per protocol revision: 2026-07-28 (stateless) and 2025-11-25
// (sessions). The surface is served as cmd/toolwire serves it: the HTTP
// port (httpserve, its body limit set to the engine's message limit) on a
// loopback listener, /mcp behind auth.RequireCredentials with bearer
// tokens, driven by the go-sdk's client over TCP.
func TestSurface(t *testing.T) {
	t.Parallel()
	for _, rev := range []string{mcpserve.RevisionStateless, mcpserve.RevisionSessions} {
		t.Run(rev, func(t *testing.T) {
			t.Parallel()
			surfacetest.Run(t, func(t *testing.T, cfg surfacetest.Config) surfacetest.Surface {
				return newMCPSurface(t, cfg, rev)
			})
		})
	}
}

// mcpSurface is the suite's adapter for /mcp: a go-sdk client session per
// caller (its bearer token on every request), opened at one revision on
// first use. Tools is tools/list, every page, mapped back to toolwire's
// declarations; Call is tools/call with toolwire's _meta keys (session_id,
// idempotency_key, call_id), its result mapped back from the MCP result and
// its _meta (error_kind, replayed, truncated, original_size, details).
// Cancelling Call's context is the SDK's cancellation:
// notifications/cancelled on 2025-11-25, closing the POST on 2026-07-28.
//
// What MCP cannot express, and so Lacks:
//
//   - Batches: tools/call is one call and MCP has no batch, so there are
//     no batch events, lanes planned over a batch, batch options or batch
//     bounds (too many calls). A session's concurrent calls keep the lanes'
//     order instead (TestSessionOrdering), which the suite, whose lanes are
//     a batch's, does not express.
//   - CallTimeouts: tools/call has no timeout of its own, and mcpserve reads
//     none from _meta; a call's deadline comes from the tool's and the
//     server's limits. (The abandonment subtest, which needs a short call
//     timeout, is skipped with it.)
//   - Deadlines: HTTP carries no deadline (there is no grpc-timeout or
//     Connect-Timeout-Ms in MCP): the server never learns the client's, so
//     a call cannot end with a TIMEOUT result just before it. A client
//     whose deadline passes cancels the request, which Cancel/Call covers.
//   - ArgumentText: tools/call's arguments are JSON inside the JSON-RPC
//     request, not the model's text, so they cannot be malformed JSON.
//     (Another JSON value than MCP's object does reach the engine, and is
//     an INVALID_ARGUMENTS result: TestCallResults.)
//   - SessionlessCalls, on 2025-11-25 only: a call that names no
//     toolwire.dev/session_id belongs to its MCP session (Mcp-Session-Id),
//     so there is no call without a session there.
//
// It lacks no error kinds (_meta carries them), no replay flag, no
// idempotency keys, no sessions (_meta's session_id) and no message limit
// (the HTTP port's body limit, a 413 with resource_exhausted).
//
// The HTTP port answers some requests before MCP sees them: 401 without
// valid credentials (a Connect-style body and a challenge), which the
// go-sdk's client reports only as its status text; the adapter's HTTP
// client reads such a refusal itself and hands the SDK a transport error
// (portRefusal) that keeps the code. (A body over the limit is answered as
// a JSON-RPC error to its request, mcpserve.Refuse, which the SDK reads.)
type mcpSurface struct {
	url, rev string

	mu      sync.Mutex
	clients map[string]*mcp.ClientSession // by bearer token
	conns   []*http.Transport
	closed  bool
}

func newMCPSurface(t *testing.T, cfg surfacetest.Config, rev string) *mcpSurface {
	t.Helper()
	var tokens []auth.Token
	for _, c := range cfg.Callers {
		tokens = append(tokens, auth.Token{Name: c.Name, Hash: auth.HashToken(c.Token)})
	}
	v, err := auth.New(auth.Config{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	port := httpserve.New(httpserve.Config{MaxBodyBytes: int64(cfg.Engine.Config().MaxMessageBytes), DrainTimeout: 5 * time.Second}, nil, log)
	srv, err := mcpserve.New(cfg.Engine, cfg.Registry, mcpserve.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	port.Handle("/mcp", auth.RequireCredentials(v, log)(srv), mcpserve.Refuse)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- port.Serve(ctx, lis) }()
	s := &mcpSurface{url: "http://" + lis.Addr().String() + "/mcp", rev: rev, clients: map[string]*mcp.ClientSession{}}
	t.Cleanup(func() {
		s.close()
		// As cmd/toolwire stops the port: the surface drains the engine and
		// closes its sessions while the port drains its requests.
		cancel()
		srv.Shutdown()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// client returns caller's client session, opening it on first use. A
// caller the server refuses gets the refusal, and no session.
func (s *mcpSurface) client(ctx context.Context, caller surfacetest.Caller) (*mcp.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the surface's adapter is closed")
	}
	if cs := s.clients[caller.Token]; cs != nil {
		return cs, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	s.conns = append(s.conns, tr)
	hc := &http.Client{Transport: &bearerTransport{token: caller.Token, base: tr}}
	c := mcp.NewClient(&mcp.Implementation{Name: "surfacetest", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: hc, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: s.rev})
	if err != nil {
		return nil, err
	}
	if got := cs.InitializeResult().ProtocolVersion; got != s.rev {
		_ = cs.Close()
		return nil, fmt.Errorf("negotiated revision %s, want %s", got, s.rev)
	}
	s.clients[caller.Token] = cs
	return cs, nil
}

func (s *mcpSurface) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, cs := range s.clients {
		_ = cs.Close()
	}
	for _, tr := range s.conns {
		tr.CloseIdleConnections()
	}
}

func (s *mcpSurface) Tools(ctx context.Context, caller surfacetest.Caller) ([]*toolwirev1.Tool, error) {
	cs, err := s.client(ctx, caller)
	if err != nil {
		return nil, err
	}
	var out []*toolwirev1.Tool
	params := &mcp.ListToolsParams{}
	for {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, tl := range res.Tools {
			d, err := declaration(tl)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		if res.NextCursor == "" {
			return out, nil
		}
		params.Cursor = res.NextCursor
	}
}

// declaration is an MCP tool as toolwire declares it.
func declaration(tl *mcp.Tool) (*toolwirev1.Tool, error) {
	d := &toolwirev1.Tool{Name: tl.Name, Title: tl.Title, Description: tl.Description, Annotations: &toolwirev1.ToolAnnotations{}}
	var err error
	if d.InputSchema, err = jsonText(tl.InputSchema); err != nil {
		return nil, fmt.Errorf("tool %s: inputSchema: %w", tl.Name, err)
	}
	if d.OutputSchema, err = jsonText(tl.OutputSchema); err != nil {
		return nil, fmt.Errorf("tool %s: outputSchema: %w", tl.Name, err)
	}
	if a := tl.Annotations; a != nil {
		d.Annotations.ReadOnly = a.ReadOnlyHint
		d.Annotations.Idempotent = a.IdempotentHint
		// MCP's defaults for absent hints are true; mcpserve states each.
		d.Annotations.Destructive = a.DestructiveHint == nil || *a.DestructiveHint
		d.Annotations.OpenWorld = a.OpenWorldHint == nil || *a.OpenWorldHint
	}
	return d, nil
}

func (s *mcpSurface) Batch(context.Context, surfacetest.Caller, *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.ExecuteBatchResponse, error) {
	return nil, errors.New("MCP has no batch of calls")
}

func (s *mcpSurface) Call(ctx context.Context, caller surfacetest.Caller, sessionID string, call *toolwirev1.ToolCall) (*toolwirev1.CallResult, error) {
	if call.GetTimeout() != nil {
		return nil, errors.New("tools/call cannot carry a call's timeout")
	}
	params := &mcp.CallToolParams{Name: call.GetName(), Meta: mcp.Meta{}}
	if args := call.GetArguments(); args != "" {
		if !json.Valid([]byte(args)) {
			return nil, fmt.Errorf("tools/call cannot carry arguments that are not JSON: %.50q", args)
		}
		params.Arguments = json.RawMessage(args)
	}
	for k, v := range map[string]string{
		mcpserve.MetaSessionID:      sessionID,
		mcpserve.MetaIdempotencyKey: call.GetIdempotencyKey(),
		mcpserve.MetaCallID:         call.GetCallId(),
	} {
		if v != "" {
			params.Meta[k] = v
		}
	}
	cs, err := s.client(ctx, caller)
	if err != nil {
		return nil, err
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return nil, err
	}
	return callResult(call, res)
}

// callResult is an MCP result as toolwire has it: content blocks,
// structuredContent, isError, and the fields mcpserve puts in _meta. A
// JSON-RPC response answers its request, so the call's ID and tool name are
// the request's.
func callResult(call *toolwirev1.ToolCall, res *mcp.CallToolResult) (*toolwirev1.CallResult, error) {
	r := &toolwirev1.CallResult{CallId: call.GetCallId(), ToolName: call.GetName(), IsError: res.IsError}
	for _, c := range res.Content {
		switch b := c.(type) {
		case *mcp.TextContent:
			r.Content = append(r.Content, &toolwirev1.Content{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: b.Text}}})
		case *mcp.ImageContent:
			r.Content = append(r.Content, &toolwirev1.Content{Block: &toolwirev1.Content_Image{Image: &toolwirev1.ImageContent{Data: b.Data, MimeType: b.MIMEType}}})
		default:
			return nil, fmt.Errorf("a content block of type %T", c)
		}
	}
	var err error
	if r.StructuredContent, err = jsonText(res.StructuredContent); err != nil {
		return nil, fmt.Errorf("structuredContent: %w", err)
	}
	m := res.Meta
	if k, ok := m[mcpserve.MetaErrorKind].(string); ok {
		v, known := toolwirev1.ErrorKind_value["ERROR_KIND_"+k]
		if !known {
			return nil, fmt.Errorf("_meta %s: unknown error kind %q", mcpserve.MetaErrorKind, k)
		}
		r.ErrorKind = toolwirev1.ErrorKind(v)
	}
	r.Replayed, _ = m[mcpserve.MetaReplayed].(bool)
	r.Truncated, _ = m[mcpserve.MetaTruncated].(bool)
	if n, ok := m[mcpserve.MetaOriginalSize].(float64); ok {
		r.OriginalSize = uint64(n)
	}
	if d, ok := m[mcpserve.MetaDetails]; ok {
		if r.Details, err = jsonText(d); err != nil {
			return nil, fmt.Errorf("_meta %s: %w", mcpserve.MetaDetails, err)
		}
	}
	return r, nil
}

// jsonText is v, decoded from JSON by the SDK, as JSON text again; "" for
// nothing.
func jsonText(v any) (string, error) {
	if v == nil {
		return "", nil
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return "", err
	}
	return string(b), nil
}

func (s *mcpSurface) Code(err error) surfacetest.Code {
	if err == nil {
		return surfacetest.OK
	}
	var refused *portRefusal
	if errors.As(err, &refused) {
		switch refused.Code {
		case "unauthenticated":
			return surfacetest.Unauthenticated
		case "resource_exhausted":
			return surfacetest.ResourceExhausted
		}
		return surfacetest.Unknown
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		switch rpc.Code {
		case jsonrpc.CodeInvalidParams:
			return surfacetest.InvalidArgument
		case mcpserve.CodeResourceExhausted:
			return surfacetest.ResourceExhausted
		case mcpserve.CodeUnavailable:
			return surfacetest.Unavailable
		case mcpserve.CodeDeadlineExceeded:
			return surfacetest.DeadlineExceeded
		case mcpserve.CodeCancelled:
			return surfacetest.Canceled
		case jsonrpc.CodeInternalError:
			return surfacetest.Internal
		}
		return surfacetest.Unknown
	}
	// The client's own end of a request: its context.
	switch {
	case errors.Is(err, context.Canceled):
		return surfacetest.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return surfacetest.DeadlineExceeded
	}
	return surfacetest.Unknown
}

func (s *mcpSurface) Lacks() surfacetest.Lacks {
	return surfacetest.Lacks{
		Batches:          true,
		CallTimeouts:     true,
		Deadlines:        true,
		ArgumentText:     true,
		SessionlessCalls: s.rev < mcpserve.RevisionStateless,
	}
}

// bearerTransport sends a caller's bearer token on every request, and
// turns the HTTP port's own refusals into portRefusal errors.
type bearerTransport struct {
	token string
	base  *http.Transport
}

func (b *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	resp, err := b.base.RoundTrip(r)
	if err != nil || resp.StatusCode < 400 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var refusal portRefusal
	if json.Unmarshal(body, &refusal) == nil && refusal.Code != "" && !bytes.Contains(body, []byte(`"jsonrpc"`)) {
		refusal.Status = resp.StatusCode
		return nil, &refusal
	}
	// A JSON-RPC error, which the SDK reads.
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// portRefusal is a request the HTTP port refused before MCP saw it, with
// its Connect error body.
type portRefusal struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *portRefusal) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}
