package mcpserve

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
)

// A 2025-11-25 session costs the server memory and a goroutine from
// initialize until it ends, and its client need not end it: 20,000
// sessions opened and never closed took a server from 48 MB to 335 MB and
// 20,016 goroutines. So sessions are bounded here, in front of the go-sdk's
// handler (which has no bound, and idles sessions out only after its
// SessionTimeout):
//
//   - each caller may hold MaxSessionsPerCaller, the server MaxSessions;
//     a new session past either closes the session idle longest (the
//     caller's own, or, past the server's bound, that of the caller holding
//     the most), so a client that forgets its sessions keeps working and
//     costs what the bound allows; a session with a request in flight is
//     never closed for another, and when every one has one, initialize is
//     answered with a JSON-RPC error (CodeResourceExhausted) saying which
//     bound;
//   - a session with no request in flight for SessionTimeout is closed. A
//     standalone GET stream counts as a request: a client holding one is
//     connected, as the TypeScript SDK's and the Inspector are while open,
//     whatever time passes between their calls; its client gone, the
//     stream ends and the timeout runs.
//
// A closed session's next request gets 404, which tells a client to open
// another (the transport's spec).

// sessions bounds the sessions of the handler with sessions.
type sessions struct {
	max, perCaller int
	idle           time.Duration
	log            *slog.Logger

	mu      sync.Mutex
	byID    map[string]*session
	callers map[string]*callerSessions
	total   int // sessions and reservations
	closed  bool
}

// callerSessions are one caller's sessions, least recently used first.
type callerSessions struct {
	id  string
	n   int // sessions and reservations
	lru list.List
}

// session is one session of the SDK's, as the bound sees it.
type session struct {
	id      string
	owner   *callerSessions
	ss      *mcp.ServerSession
	busy    int // POST and DELETE requests in flight: never closed for another
	streams int // GET streams open
	used    time.Time
	elem    *list.Element
	timer   *time.Timer
	gone    bool
}

// reservation is a place for a session, taken before initialize reaches
// the SDK and filled by the session it opens (opened), or given back.
type reservation struct {
	owner *callerSessions
	s     *session // the session opened, once it is
	done  bool     // given back
}

// reservationKey is the context key of a reservation: initialize's
// request carries it to the middleware (the SDK hands the session's
// handlers the context of the request that opened it).
type reservationKey struct{}

func newSessions(max, perCaller int, idle time.Duration, log *slog.Logger) *sessions {
	return &sessions{max: max, perCaller: perCaller, idle: idle, log: log, byID: map[string]*session{}, callers: map[string]*callerSessions{}}
}

// errSessionBound is a new session refused: every session within the
// bound has a request in flight.
type errSessionBound struct{ message string }

func (e *errSessionBound) Error() string { return e.message }

// reserve takes a place for a new session of caller, closing the sessions
// idle longest that must make room. It fails when none can.
func (t *sessions) reserve(caller string) (*reservation, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, &errSessionBound{"the MCP endpoint is closing"}
	}
	c := t.callers[caller]
	if c == nil {
		c = &callerSessions{id: caller}
	}
	var victims []*session
	if c.n >= t.perCaller {
		v := c.oldestIdle(nil)
		if v == nil {
			n := c.n // read under t.mu: a release may change it
			t.mu.Unlock()
			return nil, &errSessionBound{fmt.Sprintf("this caller has %d MCP sessions open (mcp_max_sessions_per_caller), each with a request in flight; end one (DELETE) or wait for one's request to end, or use protocol version %s, which needs no session", n, RevisionStateless)}
		}
		victims = append(victims, v)
	}
	if t.total-len(victims) >= t.max {
		v := t.fullestIdle(victims)
		if v == nil {
			n := t.total
			t.mu.Unlock()
			return nil, &errSessionBound{fmt.Sprintf("the server has %d MCP sessions open (mcp_max_sessions), each with a request in flight; retry later, or use protocol version %s, which needs no session", n, RevisionStateless)}
		}
		victims = append(victims, v)
	}
	for _, v := range victims {
		t.remove(v)
	}
	c.n++
	t.total++
	t.callers[caller] = c
	t.mu.Unlock()
	for _, v := range victims {
		t.log.Debug("closing the MCP session idle longest for a new one past the sessions' bound", "session_id", v.id, "caller", v.owner.id)
		_ = v.ss.Close() // its requests are none, its GET stream ends
	}
	return &reservation{owner: c}, nil
}

// oldestIdle is c's session idle longest with no POST or DELETE in
// flight, other than those in skip; nil if none.
func (c *callerSessions) oldestIdle(skip []*session) *session {
	for e := c.lru.Front(); e != nil; e = e.Next() {
		s := e.Value.(*session)
		if s.busy == 0 && !contains(skip, s) {
			return s
		}
	}
	return nil
}

// fullestIdle is the session idle longest of the caller holding the most
// sessions that has one not in skip; nil if no caller has. t.mu is held.
func (t *sessions) fullestIdle(skip []*session) *session {
	var best *session
	bestN := 0
	for _, c := range t.callers {
		if c.n < bestN {
			continue
		}
		v := c.oldestIdle(skip)
		if v == nil {
			continue
		}
		if c.n > bestN || best == nil || v.used.Before(best.used) {
			best, bestN = v, c.n
		}
	}
	return best
}

func contains(ss []*session, s *session) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// opened fills r with the session ss that its initialize opened. The
// session counts its initialize as a request in flight until release.
func (t *sessions) opened(r *reservation, ss *mcp.ServerSession) {
	t.mu.Lock()
	if r.s != nil {
		t.mu.Unlock()
		return // a second initialize of the session
	}
	if r.done || t.closed {
		// Its request ended first (its client went away), or the surface
		// is closing: a session that holds no place is not kept.
		// Closed on its own goroutine: this runs in the session's
		// initialize handler, which Close waits for.
		t.mu.Unlock()
		go ss.Close()
		return
	}
	s := &session{id: ss.ID(), owner: r.owner, ss: ss, busy: 1, used: time.Now()}
	s.elem = r.owner.lru.PushBack(s)
	s.timer = time.AfterFunc(t.idle, func() { t.expire(s) })
	s.timer.Stop()
	t.byID[s.id] = s
	r.s = s
	t.mu.Unlock()
}

// release ends the reservation's initialize: the session it opened, if
// any, is idle now unless other requests are in flight; a place no
// session filled is given back.
func (t *sessions) release(r *reservation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	if r.s == nil {
		c := r.owner
		c.n--
		t.total--
		if c.n == 0 && t.callers[c.id] == c {
			delete(t.callers, c.id)
		}
		return
	}
	t.endLocked(r.s, false)
}

// begin counts a request of session id in flight (a GET stream when
// stream is true), and returns its session; nil when the bound does not
// know it (the SDK answers 404 then).
func (t *sessions) begin(id string, stream bool) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byID[id]
	if s == nil {
		return nil
	}
	if stream {
		s.streams++
	} else {
		s.busy++
	}
	s.timer.Stop()
	s.used = time.Now()
	s.owner.lru.MoveToBack(s.elem)
	return s
}

// end counts that request ended.
func (t *sessions) end(s *session, stream bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLocked(s, stream)
}

func (t *sessions) endLocked(s *session, stream bool) {
	if s.gone {
		return
	}
	if stream {
		s.streams--
	} else {
		s.busy--
	}
	s.used = time.Now()
	s.owner.lru.MoveToBack(s.elem)
	if s.busy == 0 && s.streams == 0 {
		s.timer.Reset(t.idle)
	}
}

// expire closes s, idle for the timeout.
func (t *sessions) expire(s *session) {
	t.mu.Lock()
	if s.gone || s.busy > 0 || s.streams > 0 {
		t.mu.Unlock()
		return
	}
	t.remove(s)
	t.mu.Unlock()
	t.log.Debug("closing an idle MCP session", "session_id", s.id, "caller", s.owner.id, "idle_timeout", t.idle.String())
	_ = s.ss.Close()
}

// forget drops session id, which the SDK no longer has (its client ended
// it, or it answered 404).
func (t *sessions) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.byID[id]; s != nil {
		t.remove(s)
	}
}

// remove drops s from the bound; t.mu is held.
func (t *sessions) remove(s *session) {
	s.gone = true
	s.timer.Stop()
	delete(t.byID, s.id)
	c := s.owner
	c.lru.Remove(s.elem)
	c.n--
	t.total--
	if c.n == 0 && t.callers[c.id] == c {
		delete(t.callers, c.id)
	}
}

// known reports whether session id is in the bound.
func (t *sessions) known(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id] != nil
}

// count reports the sessions open and held places.
func (t *sessions) count() (sessions, total int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID), t.total
}

// close stops the idle timers and refuses new sessions; Server.Close
// closes the SDK's sessions.
func (t *sessions) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, s := range t.byID {
		s.timer.Stop()
	}
}

// serveSessions serves a request of the handler with sessions (2025-11-25
// and older): a request of a session is counted while in flight; a POST
// naming none must open one with initialize (alone, not batched), within
// the bounds. b is a POST's body, read and checked by readBody.
func (s *Server) serveSessions(w *refusing, r *http.Request, b []byte) {
	w.sessions = true
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		stream := r.Method == http.MethodGet
		if ss := s.sessions.begin(id, stream); ss != nil {
			defer s.sessions.end(ss, stream)
		}
		s.stateful.ServeHTTP(w, r)
		if w.status == http.StatusNotFound || (r.Method == http.MethodDelete && w.status < 300) {
			s.sessions.forget(id)
		}
		return
	}
	if r.Method != http.MethodPost {
		s.stateful.ServeHTTP(w, r) // the SDK refuses it: no session named
		return
	}
	switch m := firstMessages(b); {
	case m.malformed:
		// The SDK refuses it (a parse error, as JSON-RPC).
	case m.initialize && m.batch:
		writeRefusal(w.ResponseWriter, http.StatusBadRequest, m.id, jsonrpc.CodeInvalidRequest, "invalid_argument",
			"initialize must not be part of a JSON-RPC batch: send it alone", nil)
		return
	case m.initialize:
		if err := checkInitialize(m.initParams); err != nil {
			writeRefusal(w.ResponseWriter, http.StatusBadRequest, m.id, jsonrpc.CodeInvalidParams, "invalid_argument", err.Error(), nil)
			return
		}
		caller := engine.IdentityFrom(r.Context()).ID
		res, err := s.sessions.reserve(caller)
		if err != nil {
			s.opts.Logger.Warn("refusing a new MCP session: "+err.Error(), "caller", caller)
			// 200: a JSON-RPC response to the initialize it names, as
			// Refuse answers. Clients read it as initialize's error; a 429
			// or 503, the go-sdk's client takes for a transient failure
			// and drops the body that says which bound.
			writeRefusal(w.ResponseWriter, http.StatusOK, m.id, CodeResourceExhausted, "resource_exhausted", err.Error(), nil)
			return
		}
		defer s.sessions.release(res)
		r = r.WithContext(context.WithValue(r.Context(), reservationKey{}, res))
	case m.sessionless:
		// ping and server/discover: the SDK answers them without a session.
	default:
		writeRefusal(w.ResponseWriter, http.StatusBadRequest, m.id, jsonrpc.CodeInvalidRequest, "invalid_argument",
			fmt.Sprintf("the request names no session (Mcp-Session-Id): on protocol version %s and older, send initialize first, then the Mcp-Session-Id it answers with on every request; or send Mcp-Protocol-Version: %s, which needs no session", RevisionSessions, RevisionStateless), nil)
		return
	}
	s.stateful.ServeHTTP(w, r)
}

// messages is what serveSessions needs to know of a body: whether it is a
// batch, holds an initialize, holds only requests that need no session,
// opens a subscriptions/listen stream (serve), and the first request's ID.
type messages struct {
	malformed, batch, initialize, sessionless, listen bool
	id                                                json.RawMessage
	initParams                                        json.RawMessage // the params of the initialize, if any
}

// firstMessages reads the JSON-RPC message or batch b, valid JSON with no
// member named twice (readBody), as the SDK reads it: names match exactly
// (members.go).
func firstMessages(b []byte) messages {
	var m messages
	var msgs []map[string]json.RawMessage
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		m.batch = true
		if json.Unmarshal(b, &msgs) != nil || len(msgs) == 0 {
			m.malformed = true
			return m
		}
	} else {
		var one map[string]json.RawMessage
		if json.Unmarshal(b, &one) != nil {
			m.malformed = true
			return m
		}
		msgs = []map[string]json.RawMessage{one}
	}
	m.sessionless = true
	for _, msg := range msgs {
		if id := msg["id"]; m.id == nil && len(id) > 0 && id[0] != 'n' {
			m.id = id
		}
		var method string
		if raw, ok := msg["method"]; ok && json.Unmarshal(raw, &method) != nil {
			m.malformed = true
			return m
		}
		switch method {
		case "initialize":
			m.initialize = true
			m.initParams = msg["params"]
		case "ping", "server/discover":
		case "subscriptions/listen":
			m.listen, m.sessionless = true, false
		default:
			m.sessionless = false
		}
	}
	return m
}

// checkInitialize refuses the params of an initialize that the SDK would
// answer with an error of no code (0, which no JSON-RPC client can tell
// from another), after opening a session it then closes: params missing,
// null or not an object, or a protocolVersion that is not a string, or
// capabilities or clientInfo that are not objects.
func checkInitialize(raw json.RawMessage) error {
	var p map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil || p == nil {
		return errors.New(`initialize needs params, an object: {"protocolVersion":…,"capabilities":{…},"clientInfo":{…}}`)
	}
	kinds := map[string]byte{"protocolVersion": '"', "capabilities": '{', "clientInfo": '{'}
	for name, kind := range kinds {
		v := bytes.TrimSpace(p[name])
		if len(v) > 0 && v[0] != kind && string(v) != "null" {
			what := "an object"
			if kind == '"' {
				what = "a string"
			}
			return fmt.Errorf("initialize's params.%s must be %s", name, what)
		}
	}
	return nil
}

// initialized registers the session an initialize opened, when that
// request took a reservation (serveSessions).
func (s *Server) initialized(ctx context.Context, ss *mcp.ServerSession) {
	if r, ok := ctx.Value(reservationKey{}).(*reservation); ok && ss != nil && ss.ID() != "" {
		s.sessions.opened(r, ss)
	}
}

// unreserved reports whether an initialize of session ss, whose handler
// has ctx, would open a session that holds no place in the bounds: one
// the SDK opens (its ID is not empty) on a request that serveSessions did
// not take for an initialize. Whatever made the two disagree, the
// initialize is refused before it runs, and the SDK closes the session
// initialize never opened when its request ends.
func unreserved(ctx context.Context, ss *mcp.ServerSession) bool {
	_, ok := ctx.Value(reservationKey{}).(*reservation)
	return !ok && ss != nil && ss.ID() != ""
}

// A session the SDK holds that the bound does not is one nothing above
// should let open (serveSessions reserves every initialize it sees, and
// the middleware refuses any other, unreserved); were one opened all the
// same, no bound would count it and no idle timeout would close it, and
// the SDK's own SessionTimeout cannot stand in: it runs while a session's
// GET stream is open, which here keeps a session. So sweepUntracked,
// every SessionTimeout, closes each session with an ID (2025-11-25 and
// older) that the bound did not know at this sweep or the last: one
// found at a single sweep may still be opening (initialize in flight).

// sweepUntracked closes the SDK's sessions that the bound knew at neither
// this sweep nor the last (untracked: those it found at the last), and
// returns those it found at this one.
func (s *Server) sweepUntracked(untracked map[*mcp.ServerSession]bool) map[*mcp.ServerSession]bool {
	found := map[*mcp.ServerSession]bool{}
	for ss := range s.sdk.Sessions() {
		if ss.ID() == "" || s.sessions.known(ss.ID()) {
			continue
		}
		if !untracked[ss] {
			found[ss] = true
			continue
		}
		s.opts.Logger.Warn("closing an MCP session the sessions' bounds do not hold", "session_id", ss.ID())
		_ = ss.Close()
	}
	return found
}

// sweep runs sweepUntracked every SessionTimeout until Close.
func (s *Server) sweep() {
	defer s.stopped.Done()
	tick := time.NewTicker(s.opts.SessionTimeout)
	defer tick.Stop()
	var untracked map[*mcp.ServerSession]bool
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			untracked = s.sweepUntracked(untracked)
		}
	}
}
