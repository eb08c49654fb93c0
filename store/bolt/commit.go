package bolt

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/toolwire/toolwire/store"
	bbolt "go.etcd.io/bbolt"
)

// Group commit. What a bolt transaction costs is its commit, two syncs to
// disk, not its writes; so the event logs' writes (Open, Append, RenewLog,
// RenewLogs, TakeOver, Finish, of every log in the file) and the
// variables' (SetVar, AddVar, DeleteVar: the approvals' announcements and
// mailboxes) that arrive while a commit is under way wait for it and then
// go together in the next transaction, one commit for all of them. Each
// held call renews its announcement (a SetVar) every few seconds: one
// commit each, 10,000 held calls kept 1,771 of 2,074 waiting in one. A write that finds no commit under way commits
// at once: no delay is added when there is nothing to group with.
//
// Unlike bbolt's DB.Batch, which waits up to MaxBatchDelay (10 ms) for
// company, a group here is whatever queued while the previous commit ran:
// under load the groups grow by themselves, and alone a write pays one
// commit, as with DB.Update.
//
// A write function may run more than once (its group is rolled back and
// its members run one per transaction when one of them fails unexpectedly),
// so it must set what it returns afresh each time it runs. One that
// refuses with one of the store's errors (ErrLogExists, ErrLogNotFound,
// ErrLeaseLost) must have written nothing: its group goes on without it.

// committer queues the writes of the group being formed.
type committer struct {
	mu    sync.Mutex
	queue []*commitReq // waiting for the next commit, in arrival order
	busy  bool         // a leader is committing; the queue's first becomes the next

	commits atomic.Uint64 // transactions committed or rolled back, for Commits

	beforeCommit func() // a test's: runs as a leader starts its group's commit, the group taken
}

type commitReq struct {
	fn   func(tx *bbolt.Tx) error
	err  error
	lead bool          // woken to commit the queue rather than with its result
	wake chan struct{} // closed when err is set, or lead
}

// refusal reports whether err is one a write function returns before it
// writes anything.
func refusal(err error) bool {
	return errors.Is(err, store.ErrLogExists) || errors.Is(err, store.ErrLogNotFound) || errors.Is(err, store.ErrLeaseLost)
}

// grouped runs fn in a write transaction shared with the writes queued
// beside it (see committer) and returns fn's error, or the commit's.
func (s *Store) grouped(fn func(tx *bbolt.Tx) error) error {
	c := &s.gc
	r := &commitReq{fn: fn, wake: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if c.busy {
		c.mu.Unlock()
		<-r.wake
		if !r.lead {
			return r.err
		}
		c.mu.Lock()
	}
	c.busy = true
	group := c.queue
	c.queue = nil
	c.mu.Unlock()
	if c.beforeCommit != nil {
		c.beforeCommit() // the next group queues meanwhile
	}

	s.commitGroup(group)

	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.lead = true
		close(next.wake)
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	for _, g := range group {
		if g != r {
			close(g.wake)
		}
	}
	return r.err
}

// errSolo rolls a group back to run its members one per transaction.
var errSolo = errors.New("bolt store: a write of the group failed")

// commitGroup runs the group's functions in one transaction and sets each
// one's error.
func (s *Store) commitGroup(group []*commitReq) {
	s.gc.commits.Add(1)
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, r := range group {
			if r.err = r.fn(tx); r.err != nil && !refusal(r.err) {
				return errSolo // it may have written part: nothing of the group stays
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errSolo):
		for _, r := range group {
			s.gc.commits.Add(1)
			r.err = s.db.Update(r.fn)
		}
	case err != nil:
		// The commit failed: nothing of the group was written.
		for _, r := range group {
			if r.err == nil {
				r.err = err
			}
		}
	}
}

// Commits returns how many transactions the event logs' writes have
// committed (or tried to), however many writes each carried: a measure of
// the group commit, for tests and benchmarks.
func (s *Store) Commits() uint64 { return s.gc.commits.Load() }
