package mcpsource

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
	"github.com/toolwire/toolwire/tools"
)

// isResume matches a GET that resumes a stream.
func isResume(r request) bool { return r.method == "GET" && r.lastEventID != "" }

// isCall matches the POST of a tools/call.
func isCall(r request) bool { return r.rpc == "tools/call" }

// TestResume: a server that closes a call's stream after its priming event,
// asking for a reconnect after 500ms (SSE polling, MCP 2025-11-25), gets it:
// a GET with the Last-Event-ID of the last event the stream carried, no
// sooner than 500ms after the call was sent, and the call's result arrives
// on the resumed stream.
func TestResume(t *testing.T) {
	t.Parallel()
	const retry = 500 * time.Millisecond
	srv := newResumableServer(t, testserver.Hooks{})
	g, reg := newGateway(t)
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "r", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the poll tool", sourcetest.Has("r_poll"))
	rec := newRecorder()
	r := call(t, context.Background(), snap, "r_poll", `{"retry_ms":500}`, rec)
	if r.IsError || text(r) != "resumed" {
		t.Fatalf("call: %q (error %v), want \"resumed\"", text(r), r.IsError)
	}
	var msgs []string
	for _, p := range rec.got {
		msgs = append(msgs, p.Message)
	}
	if !slices.Equal(msgs, []string{"polling"}) {
		t.Errorf("progress %q, want [polling]", msgs)
	}
	posted, ok := srv.waitRequest(isCall)
	if !ok {
		t.Fatal("the server saw no tools/call")
	}
	resumes := srv.requestsMatching(isResume)
	if len(resumes) != 1 {
		t.Fatalf("%d GETs with Last-Event-ID, want 1: %+v", len(resumes), srv.requestsMatching(func(r request) bool { return true }))
	}
	got := resumes[0]
	// The stream carried the priming event (index 0) and the progress
	// notification (index 1); the go-sdk server's IDs are <stream>_<index>.
	if !strings.HasSuffix(got.lastEventID, "_1") {
		t.Errorf("Last-Event-ID %q, want the progress notification's ID (<stream>_1)", got.lastEventID)
	}
	if waited := got.at.Sub(posted.at); waited < retry {
		t.Errorf("reconnected %v after the call was sent; the server asked for %v", waited, retry)
	}
	t.Logf("resumed %v after the call was sent, with Last-Event-ID %q", got.at.Sub(posted.at), got.lastEventID)
}

// farBelowSDK is far above every bound these tests set, and far below the
// SDK's own retries (about 19 s against a refused server, without end
// against a silent one): a call that ends within it was not left to them.
const farBelowSDK = 10 * time.Second

// pollGoneServer starts a resumable server whose poll tool calls gone just
// before it closes its stream (asking for a reconnect after 100ms), and
// returns the server and the poll tool of a gateway connected to it.
func pollGoneServer(t *testing.T, cfg ServerConfig, gone func(srv *httpServer)) (*httpServer, func() (*tools.Result, time.Duration)) {
	t.Helper()
	var srv *httpServer
	srv = newResumableServer(t, testserver.Hooks{PollClosing: func() { gone(srv) }})
	cfg.URL = srv.URL
	g, reg := newGateway(t)
	g.set.MinBackoff, g.set.MaxBackoff = time.Minute, time.Minute // gone means gone for this test
	if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	tool := cfg.Name + "_poll"
	snap := sourcetest.WaitTools(t, reg, "the poll tool", sourcetest.Has(tool))
	return srv, func() (*tools.Result, time.Duration) {
		start := time.Now()
		done := make(chan *tools.Result)
		go func() { done <- call(t, context.Background(), snap, tool, `{"retry_ms":100}`, nil) }()
		select {
		case r := <-done:
			return r, time.Since(start)
		case <-time.After(waitLimit):
			t.Fatal("the call hangs on a server that is gone")
			return nil, 0
		}
	}
}

// TestResumeRefused: a server that closes a call's stream and is gone
// (refusing connections) when the client reconnects fails the call at
// once, with the cause, rather than after the SDK's retries.
func TestResumeRefused(t *testing.T) {
	t.Parallel()
	_, poll := pollGoneServer(t, ServerConfig{Name: "gone"}, (*httpServer).refuse)
	r, took := poll()
	const want = `MCP server "gone" went away during the call: no answer came, so the call may or may not have run (reconnecting: `
	if got := text(r); !r.IsError || !strings.HasPrefix(got, want) || !strings.Contains(got, "connection refused") {
		t.Errorf("call: %q; want an error result beginning %q and saying the connection was refused", got, want)
	}
	if took > farBelowSDK {
		t.Errorf("the call took %v", took)
	}
	t.Logf("error result after %v: %q", took, text(r))
}

// TestResumeSilent: a server that closes a call's stream and then accepts
// connections but answers nothing (neither the reconnect nor a ping) fails
// the call once the server's reconnect_timeout has passed.
func TestResumeSilent(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	srv, poll := pollGoneServer(t, ServerConfig{Name: "mute", ReconnectTimeout: bound}, func(srv *httpServer) { srv.silence(nil) })
	r, took := poll()
	want := fmt.Sprintf(`MCP server "mute" went away during the call: no answer came, so the call may or may not have run (reconnecting: no answer within %v)`, bound)
	if got := text(r); !r.IsError || got != want {
		t.Errorf("call: %q; want the error result %q", got, want)
	}
	if took > farBelowSDK {
		t.Errorf("the call took %v", took)
	}
	if len(srv.requestsMatching(isResume)) != 1 || len(srv.requestsMatching(isPing)) != 1 {
		t.Errorf("requests %+v: want one resuming GET and one ping", srv.requestsMatching(func(request) bool { return true }))
	}
	t.Logf("error result after %v: %q", took, text(r))
}

func isPing(r request) bool { return r.rpc == "ping" }

// TestResumeHeldHeaders: the go-sdk's server sends the headers of a
// resumed stream only with its next event. The server answers the ping sent
// with the reconnect, so the reconnect may wait far longer than the
// reconnect_timeout for its result.
func TestResumeHeldHeaders(t *testing.T) {
	t.Parallel()
	const bound = time.Second
	var srv *httpServer
	srv = newResumableServer(t, testserver.Hooks{PollClosed: func(context.Context) {
		if _, ok := srv.waitRequest(isResume); ok {
			time.Sleep(2 * bound) // the reconnect waits, headers and all
		}
	}})
	g, reg := newGateway(t)
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "held", URL: srv.URL, ReconnectTimeout: bound}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the poll tool", sourcetest.Has("held_poll"))
	if r := call(t, context.Background(), snap, "held_poll", `{"retry_ms":50}`, nil); r.IsError || text(r) != "resumed" {
		t.Errorf("call: %q (error %v), want \"resumed\"", text(r), r.IsError)
	}
	// One reconnect, answered by a ping; a second ping comes when the
	// client saw the poll's stream end as broken (broke), which depends on
	// how the close reached it.
	if resumes, pings := len(srv.requestsMatching(isResume)), len(srv.requestsMatching(isPing)); resumes != 1 || pings < 1 || pings > 2 {
		t.Errorf("%d reconnects and %d pings, want one reconnect and one or two pings", resumes, pings)
	}
}

// TestHandshakeGETSilent: a server that answers the handshake but never the
// GET that opens its stream of notifications (there is nothing to ping with
// yet) is given up once reconnect_timeout has passed, and retried, where
// the SDK would wait for the GET without end.
func TestHandshakeGETSilent(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(t, testserver.Hooks{})
	srv.silence(func(r *http.Request) bool { return r.Method == http.MethodGet })
	g, _ := newGateway(t)
	logs := &logbuf.Buffer{}
	g.log = slog.New(slog.NewTextHandler(logs, nil))
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "h", URL: srv.URL, ReconnectTimeout: 100 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	for limit := time.Now().Add(waitLimit); strings.Count(logs.String(), "retrying") < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("no retries logged:\n%s", logs)
		}
	}
	if !strings.Contains(logs.String(), "no answer within 100ms") {
		t.Errorf("the log does not say why the session was given up:\n%s", logs)
	}
}
