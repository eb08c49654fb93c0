// Package sequence orders the calls of one session that arrive one at a
// time (MCP's tools/call, a unary CallTool), by the rules lanes apply
// within a batch: a first-in, first-out readers-writer queue per session.
// A safe call starts at once while only safe calls of its session run and
// none waits, up to a bound; any other call waits until every earlier call
// of the session has ended, and every later call waits for it; calls
// start in arrival order. The calls waiting are bounded per session and
// per owner (the caller), over all its sessions. The engine's Sequence
// keys sessions by caller and judges which calls are safe.
package sequence

import (
	"context"
	"fmt"
	"sync"
)

// FullError refuses a call when maxWaiting calls of its session, or of
// its owner's sessions together (Owner), already wait for their turn.
type FullError struct {
	Waiting, Limit int
	Owner          bool // the owner's bound, not the session's
}

func (e *FullError) Error() string {
	if e.Owner {
		return fmt.Sprintf("this caller has %d calls waiting for their turn in its sessions already; the limit is %d", e.Waiting, e.Limit)
	}
	return fmt.Sprintf("session has %d calls waiting for their turn already; the limit is %d", e.Waiting, e.Limit)
}

// Sequencer holds the queue of every session with a call running or
// waiting; a session's queue goes once it is empty. Its zero value is
// ready to use.
type Sequencer struct {
	mu     sync.Mutex
	queues map[string]*seqQueue
	owners map[string]int // calls waiting, by owner; an owner with none is absent
}

// seqQueue is one session's calls: those running, then those waiting in
// arrival order.
type seqQueue struct {
	owner     string
	running   int  // calls running
	exclusive bool // the call running is unsafe
	waiting   []*seqWaiter
}

type seqWaiter struct {
	safe  bool
	ready chan struct{} // closed when the call's turn comes
}

// Enter waits for the turn of a call of the session key of owner, safe
// or not, as the package comment says, with at most parallel safe calls
// at once, and returns the function that ends its turn (call it once;
// later calls do nothing). When maxWaiting calls of the session, or of
// all owner's sessions, wait already it returns a *FullError at once;
// when ctx ends first, the call leaves the queue and Enter returns ctx's
// error. A key belongs to one owner.
//
// A call waiting costs its surface a goroutine and its request (an MCP
// tools/call: about 15 KB), and on MCP its client need not stay for it:
// bounded per session only, one caller could leave max_calls waiting in
// each of as many sessions as it could give a call that held the rest
// back (1,024 in each of 20 sessions held 21,000 goroutines and 311 MB).
func (s *Sequencer) Enter(ctx context.Context, owner, key string, safe bool, parallel, maxWaiting int) (func(), error) {
	s.mu.Lock()
	if s.queues == nil {
		s.queues = make(map[string]*seqQueue)
		s.owners = make(map[string]int)
	}
	q := s.queues[key]
	if q == nil {
		q = &seqQueue{owner: owner}
		s.queues[key] = q
	}
	if len(q.waiting) == 0 && q.admits(safe, parallel) {
		q.start(safe)
		s.mu.Unlock()
		return s.leaver(key, safe, parallel), nil
	}
	if len(q.waiting) >= maxWaiting {
		s.drop(key, q)
		s.mu.Unlock()
		return nil, &FullError{Waiting: len(q.waiting), Limit: maxWaiting}
	}
	if n := s.owners[owner]; n >= maxWaiting {
		s.drop(key, q)
		s.mu.Unlock()
		return nil, &FullError{Waiting: n, Limit: maxWaiting, Owner: true}
	}
	w := &seqWaiter{safe: safe, ready: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	s.owners[owner]++
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
				s.left(q.owner, 1)
				break
			}
		}
		// The calls behind it may start now (an unsafe call that left
		// had held back safe ones).
		s.left(q.owner, q.dispatch(parallel))
		s.drop(key, q)
		s.mu.Unlock()
	}
	return nil, ctx.Err()
}

// leaver returns the function that ends a started call's turn, once.
func (s *Sequencer) leaver(key string, safe bool, parallel int) func() {
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		q := s.queues[key]
		q.running--
		if !safe {
			q.exclusive = false
		}
		s.left(q.owner, q.dispatch(parallel))
		s.drop(key, q)
	})
}

// Waiting counts the calls waiting for their turn, in every session.
func (s *Sequencer) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += len(q.waiting)
	}
	return n
}

// left counts n calls of owner that no longer wait; s.mu is held.
func (s *Sequencer) left(owner string, n int) {
	if n == 0 {
		return
	}
	if s.owners[owner] -= n; s.owners[owner] <= 0 {
		delete(s.owners, owner)
	}
}

// WaitingOf counts the calls of owner waiting for their turn, in all its
// sessions.
func (s *Sequencer) WaitingOf(owner string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners[owner]
}

// drop forgets an empty queue; s.mu is held.
func (s *Sequencer) drop(key string, q *seqQueue) {
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
// start; the first that may not holds back the rest. It returns how many
// it started.
func (q *seqQueue) dispatch(parallel int) int {
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
	return n
}

// WaitingIn counts the calls of the session key waiting for their turn.
func (s *Sequencer) WaitingIn(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[key]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// Sessions counts the sessions with a call running or waiting.
func (s *Sequencer) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues)
}
