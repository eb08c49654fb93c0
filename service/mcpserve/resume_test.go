package mcpserve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// cutProxy is a TCP proxy between a client and a server that a test can
// cut, one connection at a time, as a proxy's timeout or a network change
// cuts a stream. While held, it accepts new connections but forwards none
// until released: its client must open a connection for every request
// (noKeepAlive), or a request on a pooled connection would pass the hold.
type cutProxy struct {
	t     testing.TB
	lis   net.Listener
	to    string
	mu    sync.Mutex
	conns map[string]*proxied // by the upstream connection's local address
	hold  chan struct{}       // non-nil while held; closed on release
	wg    sync.WaitGroup
}

// proxied is one connection through a cutProxy.
type proxied struct {
	client, server net.Conn
	// cut is set by cutProxy.cut, which then closes the client's side
	// itself, after the server's: the copy that ends when the server's
	// side closes must not close it first.
	cut atomic.Bool
}

func newCutProxy(t testing.TB, to string) *cutProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, lis: lis, to: to, conns: map[string]*proxied{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
		if p.hold != nil {
			close(p.hold)
			p.hold = nil
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.lis.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		hold := p.hold
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if hold != nil {
				<-hold
			}
			server, err := net.Dial("tcp", p.to)
			if err != nil {
				client.Close()
				return
			}
			c := &proxied{client: client, server: server}
			p.mu.Lock()
			p.conns[server.LocalAddr().String()] = c
			p.mu.Unlock()
			var copies sync.WaitGroup
			copies.Add(2)
			go func() { defer copies.Done(); io.Copy(server, client); server.Close() }()
			go func() {
				defer copies.Done()
				io.Copy(client, server)
				if !c.cut.Load() {
					client.Close()
				}
			}()
			copies.Wait()
		}()
	}
}

// holdNew makes new connections wait until the returned func is called.
func (p *cutProxy) holdNew() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	hold := make(chan struct{})
	p.hold = hold
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.hold == hold {
			close(hold)
			p.hold = nil
		}
	}
}

// cut ends the connection the server sees from remote: the server's side
// first, so the server has released the stream before the client can
// reconnect (serverDone is closed when the server's handler of the cut
// request returned), then the client's.
func (p *cutProxy) cut(remote string, serverDone <-chan struct{}) {
	p.mu.Lock()
	c, ok := p.conns[remote]
	p.mu.Unlock()
	if !ok {
		p.t.Fatalf("no proxied connection from %s", remote)
	}
	c.cut.Store(true)
	c.server.Close()
	<-serverDone
	c.client.Close()
}

// noKeepAlive is httpClient's client opening a connection for every
// request, so that a cutProxy's hold holds each.
func noKeepAlive(t testing.TB, token string) *http.Client {
	c := httpClient(t, token)
	c.Transport.(withToken).base.(*http.Transport).DisableKeepAlives = true
	return c
}

// requestLog records the requests of an HTTP handler: each POST's remote
// address and a channel closed when its handler returned, by the JSON-RPC
// method its body names, and the Last-Event-ID of each GET.
type requestLog struct {
	mu    sync.Mutex
	posts map[string][]post
	gets  []string // Last-Event-ID of each GET, "" for none
	seen  chan struct{}
}

type post struct {
	remote string
	done   chan struct{}
}

func (l *requestLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := make(chan struct{})
		defer close(done)
		l.mu.Lock()
		switch r.Method {
		case http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			method := "?"
			if i := bytes.Index(body, []byte(`"method":"`)); i >= 0 {
				method, _, _ = strings.Cut(string(body[i+len(`"method":"`):]), `"`)
			}
			l.posts[method] = append(l.posts[method], post{remote: r.RemoteAddr, done: done})
		case http.MethodGet:
			l.gets = append(l.gets, r.Header.Get("Last-Event-ID"))
		}
		l.mu.Unlock()
		select {
		case l.seen <- struct{}{}:
		default:
		}
		h.ServeHTTP(w, r)
	})
}

func (l *requestLog) lastPost(method string) (post, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ps := l.posts[method]
	if len(ps) == 0 {
		return post{}, false
	}
	return ps[len(ps)-1], true
}

func (l *requestLog) resumes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.gets), func(id string) bool { return id == "" })
}

// TestResumeCutStream: a go-sdk client at 2025-11-25 whose tools/call
// stream is cut mid-call (after the call's first progress notification,
// by a proxy between them) reconnects with Last-Event-ID and gets the rest
// of the call exactly once: the second progress notification and the
// result, neither the first again; the tool ran once. Once with the result
// made while no stream is attached (replayed from the event store), once
// with the call finishing after the client came back (sent live).
func TestResumeCutStream(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"result while cut", "result after resume"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			ts := newTestServer(t, &Options{ResumeRetry: 20 * time.Millisecond})
			var runs atomic.Int32
			release := make(chan struct{})
			var releasing sync.Once
			releaseTool := func() { releasing.Do(func() { close(release) }) }
			defer releaseTool() // a failed test lets the call end
			if err := ts.reg.Add(tools.MustTyped("cut", "Reports progress, waits for the test, reports again, returns.", func(ctx context.Context, c *tools.Call, _ struct{}) (*tools.Result, any, error) {
				runs.Add(1)
				c.Progressf(1, 2, "before the cut")
				select {
				case <-release:
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				}
				c.Progressf(2, 2, "after the cut")
				return tools.Text("done"), nil, nil
			})); err != nil {
				t.Fatal(err)
			}
			log := &requestLog{posts: map[string][]post{}, seen: make(chan struct{}, 1)}
			mux := http.NewServeMux()
			mux.Handle("/mcp", log.wrap(testAuth(ts.mcp)))
			srv := httptest.NewServer(mux)
			t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() }) // after the proxy's cleanup
			proxy := newCutProxy(t, srv.Listener.Addr().String())

			progress := make(chan string, 10)
			client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					progress <- r.Params.Message
				},
			})
			// The transport's default retries, as a client resuming streams has.
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + proxy.addr() + "/mcp", HTTPClient: noKeepAlive(t, "alice-token")}, &mcp.ClientSessionOptions{ProtocolVersion: RevisionSessions})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			type outcome struct {
				res *mcp.CallToolResult
				err error
			}
			called := make(chan outcome, 1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			go func() {
				params := &mcp.CallToolParams{Name: "cut"}
				params.SetProgressToken("cut")
				res, err := cs.CallTool(ctx, params)
				called <- outcome{res, err}
			}()
			if got := <-progress; got != "before the cut" {
				t.Fatalf("first progress %q", got)
			}
			p, ok := log.lastPost("tools/call")
			if !ok {
				t.Fatal("no tools/call POST seen")
			}

			allow := proxy.holdNew()
			// A test failed while held lets the held connections through,
			// or cs.Close's DELETE and the proxy's cleanup wait for them
			// until the binary's timeout, hiding the failure behind a hang.
			defer allow()
			proxy.cut(p.remote, p.done)
			if when == "result while cut" {
				releaseTool()
				waitFor(t, "the result in the event store", func() bool { return ts.mcp.events.holds(`"done"`) })
				if ids := log.resumes(); len(ids) != 0 {
					t.Errorf("GETs with Last-Event-ID %q reached the server while the proxy held new connections; the result must be replayed from the store, not sent live", ids)
				}
				allow()
			} else {
				allow()
				waitFor(t, "a GET with Last-Event-ID", func() bool { return len(log.resumes()) > 0 })
				releaseTool()
			}

			var o outcome
			select {
			case o = <-called:
			case <-time.After(30 * time.Second):
				t.Fatal("the call did not end within 30s of the resumption")
			}
			if o.err != nil {
				t.Fatalf("tools/call after the cut: %v", o.err)
			}
			if got := text(o.res); got != "done" {
				t.Errorf("result %q, want done", got)
			}
			// The client handles notifications in the order they came, maybe
			// after the result: the next one must be the second report, not
			// the first again.
			select {
			case got := <-progress:
				if got != "after the cut" {
					t.Errorf("progress after the cut: %q; want the second report, and the first not again", got)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("the second progress report never came")
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the tool ran %d times", n)
			}
			if ids := log.resumes(); len(ids) != 1 {
				t.Errorf("GETs with Last-Event-ID: %q; want one resumption", ids)
			}
		})
	}
}

// holds reports whether some kept event contains s (for tests).
func (s *eventStore) holds(sub string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.streams {
		for _, d := range l.data {
			if bytes.Contains(d, []byte(sub)) {
				return true
			}
		}
	}
	return false
}

// TestPrimingEvent: on 2025-11-25 a tools/call's stream starts with a
// priming event (an ID, a retry field, empty data) and every message has an
// ID; a GET with the priming event's ID as Last-Event-ID, after the call
// ended, replays the result. On 2026-07-28, which has no resumable streams,
// no event has an ID or a retry field; with ResumeBytes negative neither
// has a 2025-11-25 stream.
func TestPrimingEvent(t *testing.T) {
	t.Parallel()
	body := func(c *rawClient) []sseEvent {
		req := c.request(7, "tools/call", `{"name":"echo","arguments":{"text":"primed"}}`)
		h := http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"echo"}}
		resp := c.post(req, h)
		b := readAll(t, resp)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("tools/call: %s %s\n%s", resp.Status, resp.Header.Get("Content-Type"), b)
		}
		return sseEvents(b)
	}
	t.Run(RevisionSessions, func(t *testing.T) {
		t.Parallel()
		ts := newTestServer(t, &Options{ResumeRetry: 1500 * time.Millisecond})
		c := newRawClient(t, ts.url, "alice-token", RevisionSessions)
		evs := body(c)
		if len(evs) < 2 {
			t.Fatalf("events %+v; want a priming event and the result", evs)
		}
		if prime := evs[0]; prime.id == "" || prime.retry != "1500" || prime.data != "" {
			t.Errorf("first event %+v; want an ID, retry 1500 and empty data", prime)
		}
		for _, ev := range evs[1:] {
			if ev.id == "" || ev.retry != "" {
				t.Errorf("event %+v; want an ID and no retry field", ev)
			}
		}
		if !strings.Contains(evs[len(evs)-1].data, "primed") {
			t.Fatalf("last event %+v; want the result", evs[len(evs)-1])
		}

		resume := func(hc *http.Client) (*http.Response, []byte) {
			req, _ := http.NewRequest(http.MethodGet, ts.url, nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", c.session)
			req.Header.Set("Mcp-Protocol-Version", RevisionSessions)
			req.Header.Set("Last-Event-ID", evs[0].id)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return resp, readAll(t, resp)
		}
		// Another caller cannot resume alice's stream.
		if resp, b := resume(httpClient(t, "bob-token")); resp.StatusCode != http.StatusForbidden || bytes.Contains(b, []byte("primed")) {
			t.Errorf("bob resuming alice's stream: %s\n%s; want 403 and not her result", resp.Status, b)
		}
		resp, b := resume(c.http)
		replay := sseEvents(b)
		if resp.StatusCode != http.StatusOK || len(replay) == 0 || !strings.Contains(replay[len(replay)-1].data, "primed") || replay[len(replay)-1].id != evs[len(evs)-1].id {
			t.Errorf("resumed after the priming event: %s %+v; want the result again, with its ID %s", resp.Status, replay, evs[len(evs)-1].id)
		}
	})
	for _, tc := range []struct {
		rev  string
		opts *Options
	}{{RevisionStateless, nil}, {RevisionSessions + " without resumption", &Options{ResumeBytes: -1}}} {
		t.Run(tc.rev, func(t *testing.T) {
			t.Parallel()
			ts := newTestServer(t, tc.opts)
			rev, _, _ := strings.Cut(tc.rev, " ")
			for _, ev := range body(newRawClient(t, ts.url, "alice-token", rev)) {
				if ev.id != "" || ev.retry != "" || ev.data == "" {
					t.Errorf("event %+v; want data, no ID and no retry field", ev)
				}
			}
		})
	}
}

// TestEventStoreBounds: the store keeps within its budget (data and
// overheads, so entries too), drops the streams least recently written
// first and then the oldest events of the one being written, says so on
// replay (mcp.ErrEventsPurged), and forgets a closed session.
func TestEventStoreBounds(t *testing.T) {
	ctx := context.Background()
	event := func(i int) []byte { return []byte(fmt.Sprintf(`{"n":%04d}`, i)) } // 10 bytes
	replay := func(s *eventStore, session, stream string, after int) ([]string, error) {
		var got []string
		for d, err := range s.After(ctx, session, stream, after) {
			if err != nil {
				return got, err
			}
			got = append(got, string(d))
		}
		return got, nil
	}

	t.Run("many streams", func(t *testing.T) {
		const budget = 64 << 10
		s := newEventStore(budget)
		for i := range 10000 { // ~3 MB of streams and events into 64 KiB
			session := fmt.Sprintf("s%d", i%7)
			stream := fmt.Sprintf("x%d", i)
			_ = s.Open(ctx, session, stream)
			_ = s.Append(ctx, session, stream, nil) // a priming event
			_ = s.Append(ctx, session, stream, event(i))
			if s.used > budget {
				t.Fatalf("after %d streams the store holds %d bytes, over its %d", i+1, s.used, budget)
			}
		}
		if n, most := len(s.streams), budget/streamOverhead; n > most || s.lru.Len() != n {
			t.Errorf("%d streams kept (list %d); at most %d fit", n, s.lru.Len(), most)
		}
		if got, err := replay(s, "s3", "x9999", 0); err != nil || !slices.Equal(got, []string{string(event(9999))}) {
			t.Errorf("the last stream after its priming event: %q, %v", got, err)
		}
		if _, err := replay(s, "s0", "x0", 0); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("the first stream, long dropped: %v; want ErrEventsPurged", err)
		}
		for i := range 7 {
			_ = s.SessionClosed(ctx, fmt.Sprintf("s%d", i))
		}
		if s.used != 0 || len(s.streams) != 0 || len(s.bySession) != 0 || s.lru.Len() != 0 {
			t.Errorf("after every session closed: %d bytes, %d streams, %d sessions, list %d", s.used, len(s.streams), len(s.bySession), s.lru.Len())
		}
	})

	t.Run("one long stream", func(t *testing.T) {
		const budget = 4 << 10
		s := newEventStore(budget)
		_ = s.Open(ctx, "s", "old")
		_ = s.Append(ctx, "s", "old", event(0))
		for i := range 1000 {
			_ = s.Append(ctx, "s", "long", event(i))
			if s.used > budget {
				t.Fatalf("after %d events: %d bytes, over %d", i+1, s.used, budget)
			}
		}
		if _, err := replay(s, "s", "old", -1); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("the older stream: %v; want it dropped first", err)
		}
		got, err := replay(s, "s", "long", 998)
		if err != nil || !slices.Equal(got, []string{string(event(999))}) {
			t.Errorf("after event 998: %q, %v; want event 999", got, err)
		}
		if _, err := replay(s, "s", "long", 0); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("after event 0, long dropped: %v; want ErrEventsPurged", err)
		}
		for _, after := range []int{999, 5000, math.MaxInt} {
			if got, err := replay(s, "s", "long", after); err != nil || len(got) != 0 {
				t.Errorf("after event %d, the last or beyond: %q, %v; want nothing", after, got, err)
			}
		}
		if _, err := replay(s, "s", "long", math.MinInt); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("after event MinInt: %v; want ErrEventsPurged", err)
		}
	})

	t.Run("recently written survives", func(t *testing.T) {
		s := newEventStore(3*streamOverhead + 200)
		for _, stream := range []string{"a", "b", "c"} {
			_ = s.Open(ctx, "s", stream)
		}
		_ = s.Append(ctx, "s", "a", event(1)) // a is now the most recent
		_ = s.Open(ctx, "s", "d")             // over budget: b goes first
		if _, err := replay(s, "s", "b", -1); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("b: %v; want dropped", err)
		}
		if got, err := replay(s, "s", "a", -1); err != nil || len(got) != 1 {
			t.Errorf("a: %q, %v; want its event", got, err)
		}
	})
}

// BenchmarkResume: a 2025-11-25 tools/call of echo with resumable streams
// (the default: event IDs, a priming event, every event kept in the
// store) and without (ResumeBytes -1), over real loopback HTTP with the
// go-sdk's client. The ratio to report is resumable over off; store-bytes
// is what the store holds at the end, within its budget whatever b.N:
//
//	go test -run NONE -bench Resume -benchtime 3000x -count 5 ./mcpserve
func BenchmarkResume(b *testing.B) {
	for _, tc := range []struct {
		name  string
		bytes int
	}{{"resumable", 0}, {"off", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			reg, err := tools.NewRegistry(diag.Tools()...)
			if err != nil {
				b.Fatal(err)
			}
			eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
			s, err := New(eng, reg, Options{ResumeBytes: tc.bytes})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close(); eng.Close() })
			benchEcho(b, s, RevisionSessions)
			if s.events != nil {
				s.events.mu.Lock()
				b.ReportMetric(float64(s.events.used), "store-bytes")
				s.events.mu.Unlock()
			}
		})
	}
}
