package mcpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
)

// hugeBody is the size of the application/json answers of
// TestLargeResponse: more than maxResponseBody with room for what the
// sockets buffer.
const hugeBody = maxResponseBody + 24<<20

// writeHuge answers a JSON-RPC response to id whose result holds hugeBody
// bytes, as far as the client reads it, and adds what it wrote to sent.
func writeHuge(w http.ResponseWriter, id json.RawMessage, sent *atomic.Int64) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"content":[{"type":"text","text":"`)
	chunk := bytes.Repeat([]byte("A"), 1<<20)
	for range hugeBody >> 20 {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		sent.Add(1 << 20)
	}
	io.WriteString(w, `"}]}}`)
}

// TestLargeResponse: an application/json body, which the SDK reads whole,
// is read no further than maxResponseBody; the session is given up saying
// why.
func TestLargeResponse(t *testing.T) {
	t.Run("initialize", func(t *testing.T) {
		var sent atomic.Int64
		done := make(chan struct{}, 10)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { done <- struct{}{} }()
			if r.Method != http.MethodPost {
				http.Error(w, "no", http.StatusMethodNotAllowed)
				return
			}
			var msg struct{ ID json.RawMessage }
			json.NewDecoder(r.Body).Decode(&msg)
			writeHuge(w, msg.ID, &sent)
		}))
		t.Cleanup(srv.Close)
		g, reg := newGateway(t)
		logs := &logbuf.Buffer{}
		g.log = slog.New(slog.NewTextHandler(logs, nil))
		if err := g.Sync(context.Background(), []ServerConfig{{Name: "big", URL: srv.URL}}); err != nil {
			t.Fatal(err)
		}
		sourcetest.Wait(t, done, "the first answer to end")
		// The server's handler ends as the client stops reading, before
		// the client has said why: closing the gateway then could cut the
		// attempt short unlogged (4 runs in 30).
		waitLog(t, logs, "connecting: the server sent a response larger than 16 MiB")
		g.Close()
		if n := sent.Load(); n >= hugeBody {
			t.Errorf("the client read all %d MiB of the answer", n>>20)
		}
		if names := reg.Snapshot().Names(); len(names) > 0 {
			t.Errorf("tools: %v", names)
		}
	})

	t.Run("a call", func(t *testing.T) {
		var sent atomic.Int64
		done := make(chan struct{}, 1)
		srv := testserver.New(testserver.Hooks{})
		handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: true})
		web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				var msg struct {
					ID     json.RawMessage
					Method string
					Params struct{ Name string }
				}
				json.Unmarshal(body, &msg)
				if msg.Method == "tools/call" && msg.Params.Name == "image" {
					writeHuge(w, msg.ID, &sent)
					done <- struct{}{}
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			handler.ServeHTTP(w, r)
		}))
		t.Cleanup(func() {
			for ss := range srv.Sessions() {
				ss.Close()
			}
			web.Close()
		})
		g, reg := newGateway(t)
		logs := &logbuf.Buffer{}
		g.log = slog.New(slog.NewTextHandler(logs, nil))
		g.set.MinBackoff, g.set.MaxBackoff = time.Minute, time.Minute // given up means gone for this test
		if err := g.Sync(context.Background(), []ServerConfig{{Name: "big", URL: web.URL}}); err != nil {
			t.Fatal(err)
		}
		snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("big_image", "big_read"))
		r := call(t, context.Background(), snap, "big_image", `{}`, nil)
		sourcetest.Wait(t, done, "the answer to end")
		want := `MCP server "big": the server sent a response larger than 16 MiB; the session was given up, with its calls in flight`
		if !r.IsError || text(r) != want {
			t.Errorf("call: %.200q; want an error result %q", text(r), want)
		}
		if n := sent.Load(); n >= hugeBody {
			t.Errorf("the client read all %d MiB of the answer", n>>20)
		}
		sourcetest.WaitTools(t, reg, "the tools to go", none("big_"))
		for limit := time.Now().Add(waitLimit); !strings.Contains(logs.String(), "the session was given up: the server sent a response larger than 16 MiB"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(limit) {
				t.Fatalf("the log does not say why the session ended:\n%s", logs)
			}
		}
	})
}

// pager is a streamable HTTP MCP server, written by hand, whose tools/list
// pages never end: each names a next cursor (from cursor(n), n the page's
// number from 1) and holds perPage tools named after its page, each
// described in describe bytes.
type pager struct {
	perPage  int
	describe int
	cursor   func(n int) string
	lists    atomic.Int64 // tools/list requests
}

func (p *pager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "no stream", http.StatusMethodNotAllowed)
		return
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ID == nil {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	var result any
	switch req.Method {
	case "initialize":
		result = map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "pager", "version": "1"}}
	case "tools/list":
		n := int(p.lists.Add(1))
		var list []any
		for i := range p.perPage {
			list = append(list, map[string]any{"name": "t" + strconv.Itoa(n) + "_" + strconv.Itoa(i), "description": strings.Repeat("d", p.describe), "inputSchema": map[string]any{"type": "object"}})
		}
		result = map[string]any{"tools": list, "nextCursor": p.cursor(n)}
	default:
		result = map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
}

// TestEndlessToolsList: a tools/list that never ends is cut short at the
// bounds with an error logged, and the tools listed before the cut are
// offered, once: the session stays up. The bounds are lowered, to keep
// the test short; New's are the constants.
func TestEndlessToolsList(t *testing.T) {
	const desc = 10 << 10 // bytes of each description of the bytes case
	bounds := listing.Bounds{Tools: 1000, Bytes: 1 << 20, Pages: 100}
	bytesCut := bounds.Bytes / (desc + len(`p_t1_1{"type":"object"}`))
	for _, tc := range []struct {
		name              string
		perPage, describe int
		cursor            func(n int) string
		offered           int    // tools offered
		pages             int    // tools/list requests
		log               string // the error logged
	}{
		{"more tools than the bound", 100, 0, strconv.Itoa, bounds.Tools, bounds.Tools / 100, "the server lists more than 1000 tools"},
		{"more bytes than the bound", 10, desc, strconv.Itoa, bytesCut, bytesCut/10 + 1, "the server's tools take more than 1 MiB"},
		{"more pages than the bound", 1, 0, strconv.Itoa, bounds.Pages, bounds.Pages, "the server's listing goes on past 100 pages"},
		{"a repeated cursor", 10, 0, func(int) string { return "again" }, 20, 2, `the server's listing repeats a page (cursor \"again\" after 2 pages)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &pager{perPage: tc.perPage, describe: tc.describe, cursor: tc.cursor}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			g, reg := newGateway(t)
			if g.listBounds != (listing.Bounds{Tools: 10_000, Bytes: 64 << 20, Pages: 1_000}) {
				t.Errorf("New's bounds %+v", g.listBounds)
			}
			g.listBounds = bounds
			logs := &logbuf.Buffer{}
			g.log = slog.New(slog.NewTextHandler(logs, nil))
			if err := g.Sync(context.Background(), []ServerConfig{{Name: "p", URL: srv.URL}}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the tools listed before the cut", func(names []string) bool { return len(names) > 0 })
			if n := snap.Len(); n != tc.offered {
				t.Errorf("%d tools offered; want %d", n, tc.offered)
			}
			if n := p.lists.Load(); n != int64(tc.pages) {
				t.Errorf("%d pages asked for; want %d", n, tc.pages)
			}
			if !strings.Contains(logs.String(), "level=ERROR msg=\"MCP server's tools/list cut short; offering the tools listed before the cut\"") ||
				!strings.Contains(logs.String(), tc.log) {
				t.Errorf("the log does not say %q:\n%.2000s", tc.log, logs)
			}
			if strings.Contains(logs.String(), "unavailable") {
				t.Errorf("the session did not stay up:\n%.2000s", logs)
			}
		})
	}
}
