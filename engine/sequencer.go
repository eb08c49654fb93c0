package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/toolwire/toolwire/tools"
)

// A batch's lanes order its calls because they arrive together. A surface
// whose calls arrive one at a time (MCP's tools/call, a unary CallTool)
// runs each as a batch of one, so the calls of one session that a client
// sends concurrently need another way to keep the same rules. Sequence is
// that way: a first-in, first-out readers-writer queue per session.

// Sequence orders the calls of one session that arrive one at a time, by
// the rules lanes apply within a batch. Calls with the same sessionID and
// the same caller (see CallerFrom; sessions are scoped by caller, as
// session variables are):
//
//   - a safe call (its tool read-only, or declared safe in Config.Safe)
//     starts at once while only safe calls of the session run and none
//     waits, up to Config.MaxParallel of them at once;
//   - any other call (unsafe, unknown, or not permitted to the caller)
//     waits until every earlier call of the session has ended, and every
//     later call waits for it;
//   - calls start in arrival order: a safe call that arrives while an
//     unsafe one waits queues behind it rather than overtaking it.
//
// So [read, read, write, read] sent concurrently runs as a batch with those
// calls would: both reads together, then the write, then the last read.
// Safety is judged against snap, the snapshot the call then runs against.
//
// Sequence returns when the call may start, with done, which ends the
// call's turn; call it once the call has its result (after Run returns).
// A call with no sessionID is not ordered: Sequence returns at once, and
// the call runs as its own batch of one. When ctx ends before the call's
// turn, the call leaves the queue and Sequence returns Canceled or
// DeadlineExceeded; when MaxCallsPerBatch calls of the session already
// wait, it returns ResourceExhausted; a sessionID longer than MaxIDBytes
// is InvalidArgument, as in a batch.
func (e *Engine) Sequence(ctx context.Context, snap *tools.Snapshot, sessionID, tool string) (done func(), err error) {
	if sessionID == "" {
		return func() {}, nil
	}
	if n := len(sessionID); n > MaxIDBytes {
		return nil, errorf(InvalidArgument, "session_id %s is %d bytes; the limit is %d", shorten(sessionID), n, MaxIDBytes)
	}
	safe := false
	if t, ok := snap.Lookup(tool); ok && e.Permits(ctx, tool) {
		safe = e.safe(t)
	}
	done, err = e.seq.enter(ctx, strconv.Quote(CallerFrom(ctx))+"/"+sessionID, safe, e.cfg.MaxParallel, e.cfg.MaxCallsPerBatch)
	var full *errSessionFull
	switch {
	case errors.As(err, &full):
		return nil, NewError(ResourceExhausted, err)
	case err != nil:
		return nil, contextError(err)
	}
	return done, nil
}

// errSessionFull refuses a call when as many calls of its session as a
// batch may hold already wait for their turn.
type errSessionFull struct{ waiting, limit int }

func (e *errSessionFull) Error() string {
	return fmt.Sprintf("session has %d calls waiting for their turn already; the limit is %d", e.waiting, e.limit)
}

// sequencer holds the queue of every session with a call running or
// waiting; a session's queue goes once it is empty.
type sequencer struct {
	mu     sync.Mutex
	queues map[string]*seqQueue
}

// seqQueue is one session's calls: those running, then those waiting in
// arrival order.
type seqQueue struct {
	running   int  // calls running
	exclusive bool // the call running is unsafe
	waiting   []*seqWaiter
}

type seqWaiter struct {
	safe  bool
	ready chan struct{} // closed when the call's turn comes
}

func (s *sequencer) enter(ctx context.Context, key string, safe bool, parallel, maxWaiting int) (func(), error) {
	s.mu.Lock()
	if s.queues == nil {
		s.queues = make(map[string]*seqQueue)
	}
	q := s.queues[key]
	if q == nil {
		q = &seqQueue{}
		s.queues[key] = q
	}
	if len(q.waiting) == 0 && q.admits(safe, parallel) {
		q.start(safe)
		s.mu.Unlock()
		return s.leaver(key, safe, parallel), nil
	}
	if len(q.waiting) >= maxWaiting {
		s.mu.Unlock()
		return nil, &errSessionFull{waiting: len(q.waiting), limit: maxWaiting}
	}
	w := &seqWaiter{safe: safe, ready: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return s.leaver(key, safe, parallel), nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-w.ready:
		// Its turn came as ctx ended: give the turn back.
		s.mu.Unlock()
		s.leaver(key, safe, parallel)()
	default:
		for i, o := range q.waiting {
			if o == w {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				break
			}
		}
		// The calls behind it may start now (an unsafe call that left
		// had held back safe ones).
		q.dispatch(parallel)
		s.drop(key, q)
		s.mu.Unlock()
	}
	return nil, ctx.Err()
}

// leaver returns the function that ends a started call's turn, once.
func (s *sequencer) leaver(key string, safe bool, parallel int) func() {
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		q := s.queues[key]
		q.running--
		if !safe {
			q.exclusive = false
		}
		q.dispatch(parallel)
		s.drop(key, q)
	})
}

// waiting counts the calls waiting for their turn, in every session.
func (s *sequencer) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q.waiting)
	}
	return n
}

// drop forgets an empty queue; s.mu is held.
func (s *sequencer) drop(key string, q *seqQueue) {
	if q.running == 0 && len(q.waiting) == 0 {
		delete(s.queues, key)
	}
}

// admits reports whether a call may start now, given what runs.
func (q *seqQueue) admits(safe bool, parallel int) bool {
	if safe {
		return !q.exclusive && q.running < parallel
	}
	return q.running == 0
}

func (q *seqQueue) start(safe bool) {
	q.running++
	q.exclusive = !safe
}

// dispatch starts the waiting calls from the head of the queue that may
// start; the first that may not holds back the rest.
func (q *seqQueue) dispatch(parallel int) {
	n := 0
	for _, w := range q.waiting {
		if !q.admits(w.safe, parallel) {
			break
		}
		q.start(w.safe)
		close(w.ready)
		n++
	}
	if n > 0 {
		clear(q.waiting[:n])
		q.waiting = q.waiting[n:]
	}
}
