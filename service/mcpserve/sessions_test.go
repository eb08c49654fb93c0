package mcpserve

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const listBody = `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`

// alive reports whether session id answers tools/list (404 when it is gone).
func (ts *testServer) alive(t *testing.T, token, id string) bool {
	t.Helper()
	r := ts.do(t, rawRequest{body: listBody, token: token, header: map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": RevisionSessions}})
	switch r.status {
	case http.StatusOK:
		return true
	case http.StatusNotFound:
		return false
	}
	t.Fatalf("tools/list on session %s: %d %s", id, r.status, r.body)
	return false
}

// sdkSessions counts the sessions the SDK's server holds.
func (ts *testServer) sdkSessions() int {
	n := 0
	for range ts.mcp.sdk.Sessions() {
		n++
	}
	return n
}

// holdCall starts, on session id, a call of read that waits for the gate's
// label, and returns once it runs; the call ends when the label opens.
func (ts *testServer) holdCall(t *testing.T, wg *sync.WaitGroup, token, id, label string) {
	t.Helper()
	wg.Go(func() {
		r := ts.do(t, rawRequest{body: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{"label":"` + label + `"}}}`,
			token: token, header: map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": RevisionSessions}})
		if r.status != http.StatusOK || !strings.Contains(r.body, `"text":"`+label+`"`) {
			t.Errorf("the held call %s: %d %s", label, r.status, r.body)
		}
	})
	waitFor(t, "read "+label+" to start", func() bool { return ts.gate.has("read " + label + " start") })
}

// TestSessionsPerCaller: a caller past MaxSessionsPerCaller keeps working:
// its new session closes its session idle longest (whose next request
// gets 404, the sign to open another), and no other caller's; the others
// keep working.
func TestSessionsPerCaller(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{MaxSessionsPerCaller: 3, MaxSessions: 100})
	bob := ts.openSession(t, "bob-token")
	var alice []string
	for range 3 {
		alice = append(alice, ts.openSession(t, "alice-token"))
	}
	ts.alive(t, "alice-token", alice[0]) // used last: alice[1] is now idle longest
	alice = append(alice, ts.openSession(t, "alice-token"))
	for i, want := range []bool{true, false, true, true} {
		if got := ts.alive(t, "alice-token", alice[i]); got != want {
			t.Errorf("alice's session %d alive: %v, want %v", i, got, want)
		}
	}
	if !ts.alive(t, "bob-token", bob) {
		t.Error("bob's session was closed for alice's")
	}
	if open, total := ts.mcp.sessions.count(); open != 4 || total != 4 || ts.sdkSessions() != 4 {
		t.Errorf("%d sessions counted (%d places), the SDK holds %d; want 4", open, total, ts.sdkSessions())
	}
}

// TestSessionsInTotal: past MaxSessions a new session closes the session
// idle longest of the caller holding the most.
func TestSessionsInTotal(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{MaxSessionsPerCaller: 10, MaxSessions: 4})
	a1 := ts.openSession(t, "alice-token")
	b1 := ts.openSession(t, "bob-token")
	a2 := ts.openSession(t, "alice-token")
	a3 := ts.openSession(t, "alice-token")
	b2 := ts.openSession(t, "bob-token") // alice holds the most: her a1 goes, not bob's older b1
	for _, c := range []struct {
		token, id string
		want      bool
	}{{"alice-token", a1, false}, {"bob-token", b1, true}, {"alice-token", a2, true}, {"alice-token", a3, true}, {"bob-token", b2, true}} {
		if got := ts.alive(t, c.token, c.id); got != c.want {
			t.Errorf("%s's session %s alive: %v, want %v", c.token, c.id, got, c.want)
		}
	}
	if open, _ := ts.mcp.sessions.count(); open != 4 || ts.sdkSessions() != 4 {
		t.Errorf("%d sessions counted, the SDK holds %d; want 4", open, ts.sdkSessions())
	}
}

// TestSessionsBusyAreKept: a session with a request in flight is never
// closed for another; when every session within the bound has one,
// initialize is refused with a JSON-RPC error naming the bound, and
// succeeds once a request ends.
func TestSessionsBusyAreKept(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		opts  Options
		bound string
	}{
		{"per caller", Options{MaxSessionsPerCaller: 2, MaxSessions: 100}, "mcp_max_sessions_per_caller"},
		{"in total", Options{MaxSessionsPerCaller: 100, MaxSessions: 2}, "mcp_max_sessions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ts := newTestServer(t, &c.opts)
			s1, s2 := ts.openSession(t, "alice-token"), ts.openSession(t, "alice-token")
			var one, two sync.WaitGroup
			ts.holdCall(t, &one, "alice-token", s1, "one")
			ts.holdCall(t, &two, "alice-token", s2, "two")
			r := ts.do(t, rawRequest{body: initializeBody})
			if r.status != http.StatusOK || !strings.Contains(r.body, `"code":-32010`) || !strings.Contains(r.body, `"id":1`) ||
				!strings.Contains(r.body, c.bound+")") || r.header.Get("Mcp-Session-Id") != "" {
				t.Errorf("initialize with every session busy: %d %s; want a JSON-RPC error -32010 naming %s", r.status, r.body, c.bound)
			}
			close(ts.gate.ch("one"))
			one.Wait()
			s3 := ts.openSession(t, "alice-token") // s1's call ended: s1 goes
			close(ts.gate.ch("two"))
			two.Wait()
			for _, s := range []struct {
				id   string
				want bool
			}{{s1, false}, {s2, true}, {s3, true}} {
				if got := ts.alive(t, "alice-token", s.id); got != s.want {
					t.Errorf("session %s alive: %v, want %v", s.id, got, s.want)
				}
			}
		})
	}
}

// TestSessionsIdle: a session with no request in flight for
// SessionTimeout is closed; an open GET stream keeps it (its client is
// there), and once the stream ends the timeout runs. A DELETE ends a
// session and its place at once.
func TestSessionsIdle(t *testing.T) {
	t.Parallel()
	// Long enough that no session goes idle while the test opens it (an
	// initialize, then its notification) or its stream: 100 ms was not,
	// on a loaded machine.
	const idle = 2 * time.Second
	ts := newTestServer(t, &Options{SessionTimeout: idle})
	gone := ts.openSession(t, "alice-token")
	held := ts.openSession(t, "alice-token")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", held)
	req.Header.Set("Mcp-Protocol-Version", RevisionSessions)
	resp, err := httpClient(t, "alice-token").Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %v %v", resp, err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // ": ok": the stream is open
		t.Fatal(err)
	}
	// The bound lets go of it, then closes it in the SDK, whose handler
	// forgets it last: from then on it is not found.
	waitFor(t, "the idle session to close", func() bool { open, _ := ts.mcp.sessions.count(); return open == 1 })
	waitFor(t, "the idle session to be not found", func() bool {
		r := ts.do(t, rawRequest{body: listBody, token: "alice-token", header: map[string]string{"Mcp-Session-Id": gone, "Mcp-Protocol-Version": RevisionSessions}})
		return r.status == http.StatusNotFound
	})
	time.Sleep(2 * idle) // the stream's session stays through timeouts
	if !ts.alive(t, "alice-token", held) {
		t.Fatal("the session with an open GET stream was closed")
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the session to close once its stream ended", func() bool { open, _ := ts.mcp.sessions.count(); return open == 0 })
	if ts.alive(t, "alice-token", held) || ts.sdkSessions() != 0 {
		t.Errorf("after the stream ended: the session answers, or the SDK holds %d", ts.sdkSessions())
	}

	ended := ts.openSession(t, "alice-token")
	if r := ts.do(t, rawRequest{method: http.MethodDelete, header: map[string]string{"Mcp-Session-Id": ended, "Mcp-Protocol-Version": RevisionSessions}}); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if open, total := ts.mcp.sessions.count(); open != 0 || total != 0 {
		t.Errorf("after DELETE: %d sessions, %d places", open, total)
	}
}

// TestSessionsFlat: a client that opens sessions and never closes them
// costs the server MaxSessionsPerCaller sessions, however many it opens:
// the SDK holds no more, and goroutines stay flat.
func TestSessionsFlat(t *testing.T) {
	// Not parallel: it counts the process's goroutines, which the
	// package's parallel tests start and end meanwhile (Go runs them only
	// after the sequential tests).
	ts := newTestServer(t, &Options{MaxSessionsPerCaller: 20})
	c := httpClient(t, "alice-token")
	open := func(n int) {
		for range n {
			req, _ := http.NewRequest(http.MethodPost, ts.url, strings.NewReader(initializeBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body) // to the stream's end: initialize answered
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("initialize: %s", resp.Status)
			}
		}
	}
	open(20)
	before := runtime.NumGoroutine()
	open(300)
	after := runtime.NumGoroutine()
	// The SDK files a session a moment after its initialize's response
	// ends (with resumable streams, once the stream's events are
	// stored): wait for the last one.
	n := ts.sdkSessions()
	for deadline := time.Now().Add(10 * time.Second); n < 20 && time.Now().Before(deadline); n = ts.sdkSessions() {
		time.Sleep(5 * time.Millisecond)
	}
	if n != 20 {
		t.Errorf("the SDK holds %d sessions after 320 opened, want 20", n)
	}
	// Each session holds goroutines of its own; 300 more sessions would be
	// 300 more at least.
	if after > before+30 {
		t.Errorf("goroutines %d with 20 sessions, %d after 300 more opened", before, after)
	}
}

// TestSessionBoundsAreJSONRPC: the go-sdk's client reads initialize's
// refusal as a JSON-RPC error.
func TestSessionBoundsAreJSONRPC(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{MaxSessionsPerCaller: 1})
	s1 := ts.openSession(t, "alice-token")
	var wg sync.WaitGroup
	ts.holdCall(t, &wg, "alice-token", s1, "held")
	_, err := dial(t, ts.url, "alice-token", RevisionSessions, nil)
	if !isRPC(err, CodeResourceExhausted) || !strings.Contains(err.Error(), "mcp_max_sessions_per_caller") {
		t.Errorf("connect past the bound: %v; want a JSON-RPC error %d naming the bound", err, CodeResourceExhausted)
	}
	close(ts.gate.ch("held"))
	wg.Wait()
}

// TestInitializeLeftEarly: clients that hang up once initialize's stream
// has begun (its headers), before its answer, leave no session and no
// goroutine behind, and the server still closes (a session that lost its
// place was once closed from its own handler, which Close waits for).
func TestInitializeLeftEarly(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{MaxSessionsPerCaller: 3})
	c := httpClient(t, "alice-token")
	for range 100 {
		req, _ := http.NewRequest(http.MethodPost, ts.url, strings.NewReader(initializeBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // headers only
	}
	if n := ts.sdkSessions(); n > 3 {
		t.Errorf("the SDK holds %d sessions, want at most 3", n)
	}
	// newTestServer's cleanup closes the server; goleak (TestMain) fails
	// the package on what it leaves.
}
