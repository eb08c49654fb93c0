package mcpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
		logs := &sourcetest.LogBuffer{}
		g.log = slog.New(slog.NewTextHandler(logs, nil))
		if err := g.Sync(context.Background(), []ServerConfig{{Name: "big", URL: srv.URL}}); err != nil {
			t.Fatal(err)
		}
		sourcetest.Wait(t, done, "the first answer to end")
		g.Close()
		if n := sent.Load(); n >= hugeBody {
			t.Errorf("the client read all %d MiB of the answer", n>>20)
		}
		if want := "connecting: the server sent a response larger than 16 MiB"; !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
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
		logs := &sourcetest.LogBuffer{}
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
