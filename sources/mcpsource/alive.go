package mcpsource

import (
	"context"
	"fmt"
	"time"
)

// A server that stops answering (a stdio server deadlocked, or wedged in
// its runtime as Go servers were seen to be, docs/sources.md; a
// streamable HTTP server that takes requests and answers none) keeps its
// session: nothing says it is gone, so every later call would wait out
// its own timeout, until a reload or a restart. So when a call's context
// ends before its answer (its deadline passed, or it was cancelled), the
// gateway pings the server. A server that answers anything to the ping
// is kept. One that has answered nothing for the timeout (a stdio
// server's ping_timeout, a streamable HTTP server's reconnect_timeout)
// after every other call that was in flight when the ping was sent has
// ended or passed its own deadline is given up: its session ends, its
// calls in flight fail naming the cause, its tools go, and a stdio
// server's process is stopped and started again, as when it exits (a
// streamable HTTP session is made again, with backoff).
//
// Waiting for the other calls keeps a server that works one request at a
// time, and is busy with a call still within its deadline, from being
// taken for a stopped one: its answer to the ping is queued behind that
// call. What it is not kept for is a call the gateway has stopped waiting
// for: a server still busy, the timeout past the last deadline, with a
// call it was asked to cancel is stopped with it.

// defaultPingTimeout is ServerConfig.PingTimeout's default: a process
// restart costs its work and state, so it is longer than a streamable
// HTTP server's reconnect_timeout.
const defaultPingTimeout = 10 * time.Second

// maxPingTimeout caps ServerConfig.PingTimeout.
const maxPingTimeout = 5 * time.Minute

// watchCall arranges the liveness check for a call in flight on r,
// should its context end first, when it ends, not when the call returns;
// the call runs done when it returns. hs is the session's HTTP client,
// nil for stdio.
func (s *server) watchCall(ctx context.Context, r *rpc, hs *httpSession) (done func()) {
	var lose func(error)
	var timeout time.Duration
	var after string
	if sc, ok := r.connection().(*stdioConn); ok {
		lose, timeout, after = sc.giveUp, s.pingTimeout(), "the server was stopped, to be started again"
	} else if hs != nil {
		lose, timeout, after = hs.lose, hs.timeout, "the session was given up, to be made again"
	} else {
		return func() {}
	}
	check := func() { s.checkAlive(r, timeout, after, lose) }
	stop := context.AfterFunc(ctx, check)
	return func() {
		// A context ends (Err, Done) before its AfterFunc starts: a call
		// that returned in between stopped it, so it is started here.
		if stop() && ctx.Err() != nil {
			go check()
		}
	}
}

// checkAlive pings the server of r and, as described above, gives its
// session up with lose when it answers nothing for timeout; what follows
// says what lose does. One check at a time per session.
func (s *server) checkAlive(r *rpc, timeout time.Duration, after string, lose func(error)) {
	others, ok := r.startCheck(&s.g.checks)
	if !ok {
		return
	}
	defer s.g.checks.Done()
	s.g.checked("started", r)
	answered, stop := r.ping(&s.g.checks)
	defer stop()
	if !r.unanswered(answered, others, timeout, func() { s.g.checked("waiting", r) }) {
		r.endCheck()
		s.g.checked("kept", r)
		return
	}
	s.log.Error("MCP server stopped answering: "+after, "timeout", timeout.String())
	lose(fmt.Errorf("it answered no ping for %v after a call ended without its answer; %s", timeout, after))
	// The check stays under way: the session has ended.
	s.g.checked("given up", r)
}

// checked tells the tests a liveness check of r reached stage.
func (g *Gateway) checked(stage string, r *rpc) {
	if g.onCheck != nil {
		g.onCheck(stage, r)
	}
}

// pingTimeout is a stdio server's ping_timeout.
func (s *server) pingTimeout() time.Duration {
	if s.cfg.PingTimeout > 0 {
		return s.cfg.PingTimeout
	}
	return defaultPingTimeout
}

// startCheck begins a liveness check unless one is under way or the
// session is closing or has ended, counting it in wg, and returns the
// calls in flight whose contexts have not ended.
func (r *rpc) startCheck(wg interface{ Add(int) }) ([]*flight, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checking || r.draining {
		return nil, false
	}
	select {
	case <-r.ended:
		return nil, false
	default:
	}
	r.checking = true
	wg.Add(1) // under r.mu, before drain can begin: Close waits for it
	var others []*flight
	for f := range r.calls {
		if f.ctx.Err() == nil {
			if f.done == nil {
				f.done = make(chan struct{})
			}
			others = append(others, f)
		}
	}
	return others, true
}

// endCheck ends a liveness check that found the server alive.
func (r *rpc) endCheck() {
	r.mu.Lock()
	r.checking = false
	r.mu.Unlock()
}

// ping sends a ping on r, on a goroutine counted in wg; answered is
// closed when any answer comes, an error response included. stop
// abandons the wait, and the ping's write if it is still waiting (a
// server that reads nothing, its stdin's pipe full).
func (r *rpc) ping(wg interface{ Go(func()) }) (answered <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	wg.Go(func() {
		if _, err := r.send(ctx, "ping", struct{}{}); err == nil {
			close(ch)
		}
	})
	return ch, cancel
}

// unanswered reports whether answered stayed open until every call of
// others had ended or passed its deadline, and for timeout after that,
// calling waiting first when there are such calls. A session that ends
// meanwhile is not unanswered: what ended it says why.
func (r *rpc) unanswered(answered <-chan struct{}, others []*flight, timeout time.Duration, waiting func()) bool {
	if len(others) > 0 {
		waiting()
	}
	for _, f := range others {
		select {
		case <-answered:
			return false
		case <-r.ended:
			return false
		case <-f.done:
		case <-f.ctx.Done():
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-answered:
		return false
	case <-r.ended:
		return false
	case <-timer.C:
		return true
	}
}
