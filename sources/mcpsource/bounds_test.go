package mcpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

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

// How writeHuge answers: a JSON body of unknown length, one with its
// Content-Length, an SSE event.
type answer int

const (
	chunked answer = iota
	withLength
	sseEvent
)

func (a answer) String() string {
	return [...]string{"a JSON body", "a JSON body with its length", "an SSE event"}[a]
}

// writeHuge answers a JSON-RPC response to id whose result holds hugeBody
// bytes, as far as the client reads it, and raises sent to what it wrote
// of them, when that is more: the most of one answer.
func writeHuge(w http.ResponseWriter, id json.RawMessage, sent *atomic.Int64, how answer) {
	w.Header().Set("Content-Type", "application/json")
	head, tail := hugeMessage(id)
	if how == sseEvent {
		w.Header().Set("Content-Type", "text/event-stream")
		head, tail = "data: "+head, tail+"\n\n"
	}
	if how == withLength {
		w.Header().Set("Content-Length", strconv.Itoa(len(head)+hugeBody+len(tail)))
	}
	io.WriteString(w, head)
	chunk := bytes.Repeat([]byte("A"), 1<<20)
	for i := range hugeBody >> 20 {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		for n := int64(i+1) << 20; ; {
			if m := sent.Load(); m >= n || sent.CompareAndSwap(m, n) {
				break
			}
		}
	}
	io.WriteString(w, tail)
}

// hugeMessage is the JSON-RPC message writeHuge writes, but for the
// hugeBody bytes between head and tail.
func hugeMessage(id json.RawMessage) (head, tail string) {
	return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"`, `"}]}}`
}

// TestLargeResponse: an application/json body, which the SDK reads whole,
// is read no further than maxResponseBody; the request it answers fails
// saying why, and the session goes on.
func TestLargeResponse(t *testing.T) {
	t.Run("initialize", func(t *testing.T) {
		var sent atomic.Int64
		done := make(chan struct{}, 10)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				select {
				case done <- struct{}{}:
				default: // connecting again: the first answer is the test's
				}
			}()
			if r.Method != http.MethodPost {
				http.Error(w, "no", http.StatusMethodNotAllowed)
				return
			}
			var msg struct{ ID json.RawMessage }
			json.NewDecoder(r.Body).Decode(&msg)
			writeHuge(w, msg.ID, &sent, chunked)
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
		waitLog(t, logs, `error="connecting: calling \"initialize\": its answer was larger than the 16 MiB a message may be (more than 16777216 bytes), so it was dropped"`)
		g.Close()
		if n := sent.Load(); n >= hugeBody {
			t.Errorf("the client read all %d MiB of the answer", n>>20)
		}
		if names := reg.Snapshot().Names(); len(names) > 0 {
			t.Errorf("tools: %v", names)
		}
	})

	for _, how := range []answer{chunked, withLength, sseEvent} {
		t.Run("a call, "+how.String(), func(t *testing.T) {
			// The call fails saying so; the session goes on, and its
			// other calls. An SSE event is read to its end, where the
			// ID of what it answered may be.
			var sent, answerSize atomic.Int64
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
						head, tail := hugeMessage(msg.ID)
						answerSize.Store(int64(len(head) + hugeBody + len(tail)))
						writeHuge(w, msg.ID, &sent, how)
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
			if err := g.Sync(context.Background(), []ServerConfig{{Name: "big", URL: web.URL}}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("big_image", "big_read"))
			r := call(t, context.Background(), snap, "big_image", `{}`, nil)
			sourcetest.Wait(t, done, "the answer to end")
			if n := sent.Load(); n >= hugeBody && how != sseEvent {
				t.Errorf("the client read all %d MiB of the answer", n>>20)
			}
			// The size is exact when the server said it (its
			// Content-Length), or the event was read to its end.
			size := regexp.QuoteMeta(fmt.Sprintf("(more than %d bytes)", maxResponseBody))
			if how != chunked {
				size = `\((\d+) bytes\)`
			}
			want := regexp.MustCompile(`^MCP server "big" answered the call, but its answer was larger than the 16 MiB a message may be ` + size + `, so it was dropped; the session goes on$`)
			m := want.FindStringSubmatch(text(r))
			if !r.IsError || m == nil {
				t.Errorf("call: %.300q; want an error result matching %s", text(r), want)
			} else if n, _ := strconv.Atoi(m[len(m)-1]); how != chunked && n != int(answerSize.Load()) {
				t.Errorf("the size said, %d, is not the answer's, %d", n, answerSize.Load())
			}
			if r := call(t, context.Background(), snap, "big_read", `{"text":"hi"}`, nil); r.IsError || text(r) != `{"text":"hi"}` {
				t.Errorf("a call after it: %.300q", text(r))
			}
			if _, ok := reg.Snapshot().Lookup("big_image"); !ok || strings.Contains(logs.String(), "given up") {
				t.Errorf("the session was given up:\n%.3000s", logs)
			}
		})
	}
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
