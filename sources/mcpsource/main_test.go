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
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
	"github.com/toolwire/toolwire/tools"
	"go.uber.org/goleak"
)

// stdioServer is the test MCP server built as a program, run over stdio.
var stdioServer string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcpgw-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stdioServer = filepath.Join(dir, "mcptestserver")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "build", "-o", stdioServer, "./internal/testserver/stdio").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the stdio test server: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// waitLimit only keeps a broken test from hanging; nothing is timed.
const waitLimit = 30 * time.Second

// newGateway returns a gateway over an empty registry with short backoffs,
// closed when the test ends.
func newGateway(t *testing.T) (*Gateway, *tools.Registry) {
	t.Helper()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	g := New(reg, testLogger(t))
	g.set.MinBackoff, g.set.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { g.Close() })
	return g, reg
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func none(prefix string) func([]string) bool {
	return func(got []string) bool {
		for _, n := range got {
			if len(n) > len(prefix) && n[:len(prefix)] == prefix {
				return false
			}
		}
		return true
	}
}

var testTools = []string{"image", "fail", "poll", "progress", "read", "slow", "wait", "drift"}

func prefixed(prefix string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + "_" + n
	}
	return out
}

// recorder collects a call's progress reports.
type recorder struct {
	mu  sync.Mutex
	got []tools.Progress
	ch  chan tools.Progress
}

func newRecorder() *recorder { return &recorder{ch: make(chan tools.Progress, 100)} }

func (r *recorder) report(p tools.Progress) {
	r.mu.Lock()
	r.got = append(r.got, p)
	r.mu.Unlock()
	select {
	case r.ch <- p:
	default:
	}
}

// call runs the named tool's handler as the server would.
func call(t *testing.T, ctx context.Context, snap *tools.Snapshot, name, args string, rec *recorder) *tools.Result {
	t.Helper()
	tool, ok := snap.Lookup(name)
	if !ok {
		t.Fatalf("no tool %q in %v", name, snap.Names())
	}
	report := func(tools.Progress) {}
	if rec != nil {
		report = rec.report
	}
	res, err := tool.Handler(ctx, tools.NewCall("c1", name, json.RawMessage(args), report))
	if err != nil {
		return &tools.Result{IsError: true, Content: []tools.Content{{Text: "handler error: " + err.Error()}}}
	}
	return res
}

func text(r *tools.Result) string {
	s := ""
	for _, c := range r.Content {
		s += c.Text
	}
	return s
}

// httpServer serves the test MCP server over streamable HTTP, recording the
// Authorization header of each request, and each request's method, time and
// Last-Event-ID.
type httpServer struct {
	*httptest.Server
	mcp  *mcp.Server
	down func(bool)

	mu       sync.Mutex
	auth     []string
	isDwn    bool
	requests []request
	arrived  chan struct{}            // closed and replaced when a request arrives
	hold     func(*http.Request) bool // requests it accepts are held unanswered until the test ends
	release  chan struct{}            // closed when the test ends
}

// request is one HTTP request the server got.
type request struct {
	at          time.Time
	method      string // GET, POST, DELETE
	rpc         string // a POST's JSON-RPC method
	lastEventID string
	trace       http.Header // its traceparent, tracestate and baggage
}

func newHTTPServer(t testing.TB, hooks testserver.Hooks) *httpServer {
	t.Helper()
	return serveHTTP(t, hooks, nil)
}

// newResumableServer is newHTTPServer with an event store: its streams
// carry event IDs, and a client may resume them (see the poll tool).
func newResumableServer(t testing.TB, hooks testserver.Hooks) *httpServer {
	t.Helper()
	return serveHTTP(t, hooks, &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
}

func serveHTTP(t testing.TB, hooks testserver.Hooks, opts *mcp.StreamableHTTPOptions) *httpServer {
	t.Helper()
	h := &httpServer{mcp: testserver.New(hooks), arrived: make(chan struct{}), release: make(chan struct{})}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.mcp }, opts)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := request{at: time.Now(), method: r.Method, lastEventID: r.Header.Get("Last-Event-ID"), trace: http.Header{}}
		for _, k := range []string{"Traceparent", "Tracestate", "Baggage"} {
			if v := r.Header.Values(k); len(v) > 0 {
				req.trace[k] = v
			}
		}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(body, &msg)
			req.rpc = msg.Method
		}
		h.mu.Lock()
		h.auth = append(h.auth, r.Header.Get("Authorization"))
		h.requests = append(h.requests, req)
		close(h.arrived)
		h.arrived = make(chan struct{})
		down, hold := h.isDwn, h.hold
		h.mu.Unlock()
		if hold != nil && hold(r) {
			select { // accepted, and never answered
			case <-r.Context().Done():
			case <-h.release:
			}
			return
		}
		if down {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	h.down = func(d bool) {
		h.mu.Lock()
		h.isDwn = d
		h.mu.Unlock()
	}
	// Registered before the gateway's cleanup, so it runs after it. Sessions
	// the gateway could not end (the server was "down") are closed here.
	t.Cleanup(func() {
		close(h.release)
		for ss := range h.mcp.Sessions() {
			ss.Close()
		}
		h.Close()
	})
	return h
}

// silence makes the server hold every request from now on that hold
// accepts (nil: every request) unanswered: it accepts connections and reads
// requests, and says nothing.
func (h *httpServer) silence(hold func(*http.Request) bool) {
	if hold == nil {
		hold = func(*http.Request) bool { return true }
	}
	h.mu.Lock()
	h.hold = hold
	h.mu.Unlock()
}

// refuse makes the server refuse connections from now on: it stops
// listening, and closes each connection once its request in progress is
// answered. Streams already open stay open.
func (h *httpServer) refuse() {
	h.Config.SetKeepAlivesEnabled(false)
	h.Listener.Close()
}

// waitRequest waits, at most waitLimit, for a request that match accepts,
// and returns it. It may be called from any goroutine.
func (h *httpServer) waitRequest(match func(request) bool) (request, bool) {
	limit := time.After(waitLimit)
	for {
		h.mu.Lock()
		arrived := h.arrived
		for _, r := range h.requests {
			if match(r) {
				h.mu.Unlock()
				return r, true
			}
		}
		h.mu.Unlock()
		select {
		case <-arrived:
		case <-limit:
			return request{}, false
		}
	}
}

// requestsMatching returns the requests that match accepts.
func (h *httpServer) requestsMatching(match func(request) bool) []request {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []request
	for _, r := range h.requests {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}
