package mcpserve

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// BenchmarkCallEcho times one tools/call of echo, over real loopback HTTP
// with the go-sdk's client, through toolwire's /mcp (the engine's whole
// call path) and through the go-sdk's own streamable HTTP server offering
// the same echo (typed, as mcp.AddTool makes it), in the same transport
// mode: SSE responses, stateless on 2026-07-28, a session on 2025-11-25.
// "go-sdk-json" is the go-sdk's fastest mode, JSON responses, which toolwire
// does not use because progress needs SSE. The ratio to report is
// toolwire/REV over go-sdk/REV:
//
//	go test -run NONE -bench CallEcho -benchtime 3000x -count 5 ./mcpserve
func BenchmarkCallEcho(b *testing.B) {
	for _, rev := range revisions {
		b.Run("toolwire/"+rev, func(b *testing.B) { benchEcho(b, toolwireEcho(b), rev) })
		b.Run("go-sdk/"+rev, func(b *testing.B) { benchEcho(b, sdkEcho(rev == RevisionStateless, false), rev) })
	}
	b.Run("go-sdk-json/"+RevisionStateless, func(b *testing.B) { benchEcho(b, sdkEcho(true, true), RevisionStateless) })
}

// toolwireEcho is /mcp over an engine offering the diagnostic tools, with
// no authentication (the go-sdk's server has none either).
func toolwireEcho(b *testing.B) http.Handler {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	s, err := New(eng, reg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(); eng.Close() })
	return s
}

// sdkEcho is the go-sdk's server offering echo.
func sdkEcho(stateless, jsonResponse bool) http.Handler {
	type echoIn struct {
		Text string `json:"text" jsonschema:"the text to return"`
	}
	type echoOut struct {
		Text string `json:"text"`
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Returns the given text unchanged."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
			return nil, echoOut(in), nil
		})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: stateless, JSONResponse: jsonResponse})
}

func benchEcho(b *testing.B, h http.Handler, rev string) {
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	b.Cleanup(srv.CloseClientConnections)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(tr.CloseIdleConnections)
	c := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v1"}, nil)
	ctx := context.Background()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: tr}, DisableStandaloneSSE: true},
		&mcp.ClientSessionOptions{ProtocolVersion: rev})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != rev {
		b.Fatalf("negotiated %s, want %s", got, rev)
	}
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("echo: %v %+v", err, res)
		}
	}
}
