package mcpserve

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSessionOrdering: concurrent calls of one session follow the lanes'
// rules: [read A, read B, write C, read D] runs A and B together, C alone
// once both ended, and D (which arrived after C) after C. A session is the
// MCP session on 2025-11-25 and the _meta session_id on 2026-07-28.
func TestSessionOrdering(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		cs := connect(t, ts.url, "alice-token", rev, nil)
		var meta mcp.Meta
		if rev == RevisionStateless {
			meta = mcp.Meta{MetaSessionID: "s1"}
		}
		g := ts.gate
		var wg sync.WaitGroup
		send := func(verb, label string) {
			wg.Go(func() {
				res := call(t, cs, verb, `{"label":"`+label+`"}`, meta)
				if res.IsError {
					t.Errorf("%s %s: %s", verb, label, text(res))
				}
			})
		}
		send("read", "A")
		waitFor(t, "read A to start", func() bool { return g.has("read A start") })
		send("read", "B")
		waitFor(t, "read B to start", func() bool { return g.has("read B start") })
		send("write", "C")
		waitFor(t, "write C to queue", func() bool { return ts.eng.Stats().SessionWaiting == 1 })
		send("read", "D")
		waitFor(t, "read D to queue", func() bool { return ts.eng.Stats().SessionWaiting == 2 })

		close(g.ch("A"))
		waitFor(t, "read A to end", func() bool { return g.has("read A end") })
		time.Sleep(30 * time.Millisecond)
		if g.has("write C start") {
			t.Fatal("write C started while read B ran")
		}
		close(g.ch("B"))
		waitFor(t, "write C to start", func() bool { return g.has("write C start") })
		time.Sleep(30 * time.Millisecond)
		if g.has("read D start") {
			t.Fatal("read D started while write C ran")
		}
		close(g.ch("C"))
		waitFor(t, "read D to start", func() bool { return g.has("read D start") })
		close(g.ch("D"))
		wg.Wait()
		want := []string{"read A start", "read B start", "read A end", "read B end", "write C start", "write C end", "read D start", "read D end"}
		if got := g.lines(); !slices.Equal(got, want) {
			t.Errorf("order %q, want %q", got, want)
		}
	})
}

// TestNoSessionNoOrdering: on 2026-07-28 a call without a session_id is a
// batch of one: a write does not wait for a running read.
func TestNoSessionNoOrdering(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	cs := connect(t, ts.url, "alice-token", RevisionStateless, nil)
	var wg sync.WaitGroup
	wg.Go(func() { call(t, cs, "read", `{"label":"A"}`, nil) })
	waitFor(t, "read A to start", func() bool { return ts.gate.has("read A start") })
	wg.Go(func() { call(t, cs, "write", `{"label":"B"}`, nil) })
	waitFor(t, "write B to start beside read A", func() bool { return ts.gate.has("write B start") })
	close(ts.gate.ch("A"))
	close(ts.gate.ch("B"))
	wg.Wait()
}

// TestTwoReplicas: one 2026-07-28 client behind an address that sends each
// request to the other of two servers (each its own engine and registry)
// lists, calls, reports progress and replays, as against one: no request
// depends on an earlier one having reached the same replica.
func TestTwoReplicas(t *testing.T) {
	t.Parallel()
	a, b := newTestServer(t, nil), newTestServer(t, nil)
	frontURL, served := newFront(t, a, b)
	progress := make(chan float64, 100)
	cs := connect(t, frontURL+"/mcp", "alice-token", RevisionStateless, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params.Progress },
	})
	ctx := context.Background()
	for i := range 4 {
		list, err := cs.ListTools(ctx, nil)
		if err != nil || len(list.Tools) != a.reg.Snapshot().Len() {
			t.Fatalf("list %d: %v", i, err)
		}
		if res := call(t, cs, "echo", `{"text":"hi"}`, nil); text(res) != "hi" {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 60}}
	params.SetProgressToken(1)
	if res, err := cs.CallTool(ctx, params); err != nil || res.IsError || len(progress) == 0 {
		t.Fatalf("sleep: %v %+v, %d progress notifications", err, res, len(progress))
	}
	// Each replica served several of the client's requests: the front
	// alternates, and the five calls at least reached it (the lists may
	// not: the client caches them for their ttlMs, a tenth of the
	// revision's age, which a loaded machine lets grow past the gap
	// between two lists).
	if served[0].Load() < 2 || served[1].Load() < 2 {
		t.Errorf("replicas served %d and %d requests; want both several", served[0].Load(), served[1].Load())
	}
}

// newFront serves a reverse proxy that sends each request to the next of
// backends in turn, counting what each served, as a load balancer in front
// of replicas does. It returns the proxy's URL.
//
// It proxies as a proxy must for streamed responses: with full duplex on.
// An HTTP/1 server drains and closes a request's body when the handler
// starts its response, while ReverseProxy's transport, having copied the
// body's Content-Length bytes to the backend, reads it once more to check
// nothing follows; when that read comes after the backend's first event
// was relayed, it fails, and the transport drops the backend's connection
// mid-response: the client gets progress but no result
// (golang/go#40747). Under load that happened in about 2 of 900 runs
// (.ci/run failed so); the front below makes it happen every time, by
// holding the transport's last read of each body until the response has
// begun, so the test fails without full duplex.
func newFront(t *testing.T, backends ...*testServer) (string, []*atomic.Int64) {
	t.Helper()
	served := make([]*atomic.Int64, len(backends))
	proxies := make([]*httputil.ReverseProxy, len(backends))
	for i, ts := range backends {
		u, _ := url.Parse(ts.http.URL)
		served[i] = new(atomic.Int64)
		proxies[i] = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }, FlushInterval: -1}
	}
	var next atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Errorf("full duplex: %v", err)
		}
		begun := make(chan struct{})
		var once sync.Once
		begin := func() { once.Do(func() { close(begun) }) }
		defer begin()
		if r.Body != nil && r.ContentLength > 0 {
			r.Body = &lateEOF{ReadCloser: r.Body, left: r.ContentLength, begun: begun}
		}
		i := (next.Add(1) - 1) % int64(len(backends))
		served[i].Add(1)
		proxies[i].ServeHTTP(&beginWriter{ResponseWriter: w, begin: begin}, r)
	}))
	t.Cleanup(front.Close)
	t.Cleanup(front.CloseClientConnections)
	return front.URL, served
}

// lateEOF passes a request's body through, but holds the read after its
// last byte until the response has begun (begun closes).
type lateEOF struct {
	io.ReadCloser
	left  int64
	begun <-chan struct{}
}

func (b *lateEOF) Read(p []byte) (int, error) {
	if b.left == 0 {
		<-b.begun
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// beginWriter calls begin once the response's header is on the wire (the
// proxy flushes it).
type beginWriter struct {
	http.ResponseWriter
	begin func()
}

func (w *beginWriter) Flush() {
	http.NewResponseController(w.ResponseWriter).Flush()
	w.begin()
}

func (w *beginWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestRevisionHeaders: on 2026-07-28 no response names a session; on
// 2025-11-25 initialize opens one.
func TestRevisionHeaders(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	var mu sync.Mutex
	sessionIDs := map[string][]string{}
	record := func(rev string) *http.Client {
		c := httpClient(t, "alice-token")
		base := c.Transport
		c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := base.RoundTrip(r)
			if err == nil {
				mu.Lock()
				sessionIDs[rev] = append(sessionIDs[rev], resp.Header.Get("Mcp-Session-Id"))
				mu.Unlock()
			}
			return resp, err
		})
		return c
	}
	for _, rev := range revisions {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.url, HTTPClient: record(rev), DisableStandaloneSSE: true}, &mcp.ClientSessionOptions{ProtocolVersion: rev})
		if err != nil {
			t.Fatal(err)
		}
		call(t, cs, "echo", `{"text":"x"}`, nil)
		if got := cs.ID(); (got == "") != (rev == RevisionStateless) {
			t.Errorf("%s: session ID %q", rev, got)
		}
		cs.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range sessionIDs[RevisionStateless] {
		if id != "" {
			t.Errorf("2026-07-28 response with Mcp-Session-Id %q", id)
		}
	}
	if !slices.ContainsFunc(sessionIDs[RevisionSessions], func(id string) bool { return id != "" }) {
		t.Errorf("2025-11-25: no response named a session: %q", sessionIDs[RevisionSessions])
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestListTTL: the ttlMs hint is a tenth of the revision's age, capped,
// and 0 for a revision the watcher has not seen yet.
func TestListTTL(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{MaxListTTL: 30 * time.Second})
	rev := ts.reg.Snapshot().Revision()
	for _, c := range []struct {
		age, want time.Duration
	}{
		{0, 0},
		{100 * time.Second, 10 * time.Second},
		{time.Hour, 30 * time.Second},
	} {
		ts.mcp.rev.Store(&revision{id: rev, since: time.Now().Add(-c.age)})
		if got := ts.mcp.listTTL(rev); got < c.want || got > c.want+time.Second/10 {
			t.Errorf("age %s: ttl %s, want %s", c.age, got, c.want)
		}
	}
	if got := ts.mcp.listTTL("another"); got != 0 {
		t.Errorf("unseen revision: ttl %s, want 0", got)
	}
	ts.mcp.rev.Store(&revision{id: rev, since: time.Now().Add(-100 * time.Second)})
	res, err := connect(t, ts.url, "alice-token", RevisionStateless, nil).ListTools(context.Background(), nil)
	if err != nil || res.TTLMs < 9900 || res.TTLMs > 10100 {
		t.Errorf("ttlMs %d (%v), want about 10000", res.TTLMs, err)
	}
}

// TestListPages: tools/list pages by PageSize with a cursor.
func TestListPages(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{PageSize: 3})
	cs := connect(t, ts.url, "alice-token", RevisionSessions, nil)
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if want := ts.reg.Snapshot().Names(); !slices.Equal(names, want) {
		t.Errorf("paged %v, want %v", names, want)
	}
	if _, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{Cursor: "!"}); err == nil {
		t.Error("a cursor the server never gave was taken")
	}
}

// TestTaskAugmentedCallRunsPlain: a tools/call sent task-augmented (MCP
// Tasks, which this server does not declare) is answered as a plain call,
// as the spec has a server without the capability do; on 2026-07-28 its
// result is typed "complete".
func TestTaskAugmentedCallRunsPlain(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"tasked"},"task":{"ttl":60000},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest(http.MethodPost, ts.url, strings.NewReader(body))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Protocol-Version": RevisionStateless, "Mcp-Method": "tools/call", "Mcp-Name": "echo"} {
		req.Header.Set(k, v)
	}
	resp, err := httpClient(t, "alice-token").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"text":"tasked"`) || !strings.Contains(string(b), `"resultType":"complete"`) || strings.Contains(string(b), `"task"`) {
		t.Errorf("%s\n%s", resp.Status, b)
	}
}
