package mcpsource

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
)

// TestDecodeResult: the direct path's decoding gives what the SDK's
// CallToolResult and result gave, except that structured content keeps
// the server's order of keys.
func TestDecodeResult(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"text", `{"content":[{"type":"text","text":"hi"},{"type":"text","text":""}]}`},
		{"error", `{"content":[{"type":"text","text":"bad"}],"isError":true}`},
		{"image", `{"content":[{"type":"image","data":"aGVsbG8=","mimeType":"image/png"}]}`},
		{"resource link", `{"content":[{"type":"text","text":"a"},{"type":"resource_link","uri":"file:///x","name":"x"}]}`},
		{"embedded", `{"content":[{"type":"resource","resource":{"uri":"file:///x","mimeType":"text/plain","text":"body"}}]}`},
		{"structured", `{"content":[],"structuredContent":{"a":1,"b":[true,null]}}`},
		{"null structured", `{"content":[{"type":"text","text":"x"}],"structuredContent":null}`},
		{"empty", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeResult(json.RawMessage(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			var r mcp.CallToolResult
			if err := json.Unmarshal([]byte(tc.raw), &r); err != nil {
				t.Fatal(err)
			}
			want := result(&r)
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				t.Errorf("decodeResult: %s\nthe SDK's: %s", g, w)
			}
		})
	}
	// The server's order of keys is kept, compacted.
	got, err := decodeResult(json.RawMessage(`{"content":[],"structuredContent":{ "z": 1, "a": {"y":2, "b":3} }}`))
	if err != nil || string(got.StructuredContent) != `{"z":1,"a":{"y":2,"b":3}}` {
		t.Errorf("structured content: %s, %v", got.StructuredContent, err)
	}
	for _, raw := range []string{`[]`, `{"content":"x"}`, `{"content":[{"type":"mystery"}]}`} {
		if r, err := decodeResult(json.RawMessage(raw)); err == nil {
			t.Errorf("decodeResult(%s) = %+v, want an error", raw, r)
		}
	}
}

// TestDecodeResultBoundsBlocks: past maxContentBlocks, blocks of any kind
// are read but not converted, and a marker says how many were left out.
func TestDecodeResultBoundsBlocks(t *testing.T) {
	for _, block := range []string{`{"type":"text","text":""}`, `{"type":"resource_link","uri":"a:","name":""}`} {
		raw := `{"content":[` + strings.Repeat(block+",", maxContentBlocks+999) + block + `]}`
		got, err := decodeResult(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(got.Content); n != maxContentBlocks {
			t.Fatalf("%s: %d blocks; want %d, the last a marker", block, n, maxContentBlocks)
		}
		if m := got.Content[maxContentBlocks-1].Text; !strings.Contains(m, "1001 more content blocks left out") {
			t.Errorf("%s: marker %q", block, m)
		}
		// The SDK's path (streamable HTTP, later protocols) keeps as many.
		var r mcp.CallToolResult
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatal(err)
		}
		if sdk := result(&r); len(sdk.Content) != maxContentBlocks || sdk.Content[maxContentBlocks-1].Text != got.Content[maxContentBlocks-1].Text {
			t.Errorf("%s: the SDK's path kept %d blocks; want %d, the last the same marker", block, len(sdk.Content), maxContentBlocks)
		}
		// Exactly maxContentBlocks: all kept, no marker, on both paths.
		raw = `{"content":[` + strings.Repeat(block+",", maxContentBlocks-1) + block + `]}`
		if got, err = decodeResult(json.RawMessage(raw)); err != nil {
			t.Fatal(err)
		}
		if n, m := len(got.Content), got.Content[len(got.Content)-1].Text; n != maxContentBlocks || strings.Contains(m, "left out") {
			t.Errorf("%s: %d blocks of %d, the last %q; want all kept", block, n, maxContentBlocks, m)
		}
		r = mcp.CallToolResult{}
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatal(err)
		}
		if sdk := result(&r); len(sdk.Content) != maxContentBlocks || strings.Contains(sdk.Content[maxContentBlocks-1].Text, "left out") {
			t.Errorf("%s: the SDK's path kept %d blocks of %d exactly; want all", block, len(sdk.Content), maxContentBlocks)
		}
	}
}

// TestCallDirect sends calls on the gateway's own JSON-RPC to a go-sdk
// server that negotiated 2025-11-25: a result, an error from the server,
// and a call cancelled while running, which the server must see cancelled.
func TestCallDirect(t *testing.T) {
	ctx := context.Background()
	started, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "read"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, struct {
		Text string `json:"text"`
	}, error) {
		return nil, struct {
			Text string `json:"text"`
		}{in.Text}, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		<-ctx.Done()
		cancelled <- struct{}{}
		return nil, nil, ctx.Err()
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ended := make(chan struct{})
	r := newRPC(conn, ended)
	go func() {
		defer close(ended)
		for {
			msg, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if resp, ok := msg.(*jsonrpc.Response); ok {
				r.deliver(resp)
			}
		}
	}()
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := r.call(ctx, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]string{"name": "test", "version": "1"}}, &init); err != nil || init.ProtocolVersion != "2025-11-25" {
		t.Fatalf("initialize: %v, %+v", err, init)
	}
	if err := conn.Write(ctx, &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	s := &server{cfg: ServerConfig{Name: "t"}}

	res, err := s.callDirect(ctx, r, "read", json.RawMessage(`{"text":"hi"}`), "tok-1")
	if err != nil || res.IsError || string(res.StructuredContent) != `{"text":"hi"}` || len(res.Content) != 1 || res.Content[0].Text != `{"text":"hi"}` {
		t.Errorf("read: %+v, %v", res, err)
	}
	res, err = s.callDirect(ctx, r, "nonesuch", nil, "tok-2")
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].Text, `MCP server "t"`) {
		t.Errorf("an unknown tool: %+v, %v", res, err)
	}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.callDirect(cctx, r, "slow", nil, "tok-3")
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatal("the slow call did not start")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	select {
	case <-cancelled:
	case <-time.After(waitLimit):
		t.Fatal("the server did not see the call cancelled (no notifications/cancelled)")
	}
	r.drain() // nothing in flight: returns
}

// TestSentCallNoteBody: the ID of a tools/call request the SDK POSTs is
// read from the body's start, whatever the size of its arguments, and a
// request of another method (the SDK's own notifications/cancelled, made
// with the call's context) is not taken for it. That notice, as the SDK
// encodes it, is reported, and nothing else is: a call cancelled through
// the SDK waits for it (awaitNotice), up to 5 s were it never seen.
func TestSentCallNoteBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		id     any // as MakeID takes it; nil: a notification
		method string
		args   string
		want   bool
		notice bool // noteBody reports the SDK's notifications/cancelled (awaitNotice waits for it)
	}{
		{"number", float64(7), "tools/call", `{"text":"hi"}`, true, false},
		{"string", "s-1", "tools/call", `{}`, true, false},
		{"large arguments", float64(8), "tools/call", `{"text":"` + strings.Repeat("x", 1<<20) + `"}`, true, false},
		{"arguments naming the notice", float64(10), "tools/call", `{"method":"notifications/cancelled"}`, true, false},
		{"another request", float64(9), "tools/list", `{}`, false, false},
		{"cancellation", nil, "notifications/cancelled", `{"requestId":7,"reason":"context deadline exceeded"}`, false, true},
		{"another notification", nil, "notifications/progress", `{"progressToken":"t","progress":1}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := jsonrpc.MakeID(tc.id)
			if err != nil {
				t.Fatal(err)
			}
			params := json.RawMessage(tc.args)
			if tc.method == "tools/call" {
				params = json.RawMessage(`{"name":"echo","arguments":` + tc.args + `}`)
			}
			data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: tc.method, Params: params})
			if err != nil {
				t.Fatal(err)
			}
			r, err := http.NewRequest(http.MethodPost, "http://mcp.example/mcp", bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			var sc sentCall
			if notice := sc.noteBody(r); notice != tc.notice {
				t.Errorf("noteBody reported a cancellation notice: %v, want %v, from %.80s", notice, tc.notice, data)
			}
			got, ok := sc.ID()
			if ok != tc.want || (ok && got != id) {
				t.Errorf("noted %v (%v), want %v (%v), from %.80s", got.Raw(), ok, id.Raw(), tc.want, data)
			}
		})
	}
}

// TestStructuredContentAsWritten: a streamable HTTP server's structured
// content reaches the caller as the server wrote it, in a JSON answer and
// in an SSE stream, as a stdio server's does: through the SDK's any, an
// integer past 2^53 came back rounded (12345678901234567891 as
// 12345678901234567000) and keys sorted.
func TestStructuredContentAsWritten(t *testing.T) {
	const written = `{"id":12345678901234567891,"z":1,"a":0.1}`
	for _, jsonResponse := range []bool{true, false} {
		t.Run(map[bool]string{true: "JSON", false: "SSE"}[jsonResponse], func(t *testing.T) {
			srv := mcp.NewServer(&mcp.Implementation{Name: "numbers", Version: "1"}, nil)
			srv.AddTool(&mcp.Tool{Name: "id", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{
						Content:           []mcp.Content{&mcp.TextContent{Text: written}},
						StructuredContent: json.RawMessage(" { \"id\": 12345678901234567891, \"z\": 1, \"a\": 0.1 } "),
					}, nil
				})
			handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
			web := httptest.NewServer(handler)
			t.Cleanup(func() {
				for ss := range srv.Sessions() {
					ss.Close()
				}
				web.Close()
			})
			g, reg := newGateway(t)
			if err := g.Sync(context.Background(), []ServerConfig{{Name: "n", URL: web.URL}}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("n_id"))
			r := call(t, context.Background(), snap, "n_id", `{}`, nil)
			if r.IsError || string(r.StructuredContent) != written {
				t.Errorf("structured content %s (error %v: %q); want %s", r.StructuredContent, r.IsError, text(r), written)
			}
		})
	}
	// Over stdio, through the SDK (the test server's newest protocol) and
	// sent by the gateway itself (callDirect, an older one).
	for _, protocol := range []string{"", "2025-11-25"} {
		t.Run("stdio "+cmp.Or(protocol, "newest"), func(t *testing.T) {
			g, reg := newGateway(t)
			env := map[string]string{"TESTSERVER_NUMBERS_TOOL": " { \"id\": 12345678901234567891, \"z\": 1, \"a\": 0.1 } "}
			if protocol != "" {
				env["TESTSERVER_PROTOCOL"] = protocol
			}
			if err := g.Sync(context.Background(), []ServerConfig{{Name: "n", Command: stdioServer, Env: env}}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("n_numbers"))
			r := call(t, context.Background(), snap, "n_numbers", `{}`, nil)
			if r.IsError || string(r.StructuredContent) != written {
				t.Errorf("structured content %s (error %v: %q); want %s", r.StructuredContent, r.IsError, text(r), written)
			}
		})
	}
}
