// Package record holds the idempotency record and its state transitions
// for the stores that keep records themselves (memory, bolt), so both
// decide claims by one piece of code; and Waiters, which wake in-process
// waiters when a record changes.
//
// It imports only store/.
package record

import (
	"context"
	"sync"
	"time"

	"github.com/toolwire/toolwire/store"
)

// Clock is the time of a store that keeps its records itself: the wall
// clock when the store opened, advanced by the monotonic clock since. A
// lease or TTL the process keeps is then measured in time that passed, not
// in steps of the wall clock: read directly, a step forward of the lease
// (10 s: NTP correcting a drifted clock, a VM resumed, date -s) made
// every call in flight look abandoned, so its retry took its key over and
// ran it a second time, and a step backward kept a dead owner's key in
// flight for the step. A store reopened reads the wall clock again.
type Clock struct{ start time.Time }

// NewClock returns a Clock starting now.
func NewClock() *Clock { return &Clock{start: time.Now()} }

// Now is the store's time now: a time.Time whose Unix nanoseconds are the
// store's start on the wall clock plus the monotonic time since.
func (c *Clock) Now() time.Time { return c.start.Add(time.Since(c.start)) }

// Record is one idempotency record. Times are Unix nanoseconds.
type Record struct {
	Fingerprint string `json:"fp"`
	Owner       string `json:"owner"`
	LeaseUntil  int64  `json:"lease_until"`
	Done        bool   `json:"done"`
	Result      []byte `json:"result,omitempty"`
	Expires     int64  `json:"expires"`
}

// Expired reports whether r's TTL has passed.
func (r *Record) Expired(now time.Time) bool { return now.UnixNano() >= r.Expires }

// InFlight reports whether r is in flight under a live lease.
func (r *Record) InFlight(now time.Time) bool { return !r.Done && now.UnixNano() < r.LeaseUntil }

// Claim decides a claim on r, which is nil when there is no live record.
// It returns the answer and, when the claim is taken, the record to store.
func Claim(r *Record, now time.Time, fp, owner string, lease, ttl time.Duration) (store.Claim, *Record) {
	if r != nil && (r.Done || r.InFlight(now)) {
		switch {
		case r.Fingerprint != fp:
			return store.Claim{State: store.Conflict}, nil
		case r.Done:
			return store.Claim{State: store.Completed, Result: r.Result}, nil
		default:
			return store.Claim{State: store.InFlight}, nil
		}
	}
	// No record, or its owner's lease ran out: take it over.
	return store.Claim{State: store.Claimed}, &Record{
		Fingerprint: fp,
		Owner:       owner,
		LeaseUntil:  now.Add(lease).UnixNano(),
		Expires:     now.Add(ttl).UnixNano(),
	}
}

// Owned reports whether owner still holds the unfinished record r. A lease
// that ran out without a takeover still counts: nobody else ran the call.
func Owned(r *Record, owner string) bool {
	return r != nil && !r.Done && r.Owner == owner
}

// Waiters wakes goroutines waiting for a key's record to change. A key
// is kept while someone waits on it: a channel taken and never woken (the
// record had changed already, the waiter gave up, the log expired) would
// otherwise stay for good, one for each such key.
type Waiters struct {
	mu sync.Mutex
	ch map[string]*waiting
}

// waiting is a key's channel and how many wait on it.
type waiting struct {
	c chan struct{}
	n int
}

// Chan returns a channel closed at the next Wake of key, and done, which
// the caller calls once it no longer waits on it.
func (w *Waiters) Chan(key string) (c <-chan struct{}, done func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(map[string]*waiting)
	}
	wt := w.ch[key]
	if wt == nil {
		wt = &waiting{c: make(chan struct{})}
		w.ch[key] = wt
	}
	wt.n++
	return wt.c, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.ch[key] == wt { // not woken yet
			if wt.n--; wt.n == 0 {
				delete(w.ch, key)
			}
		}
	}
}

// Wake wakes the waiters of key.
func (w *Waiters) Wake(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt, ok := w.ch[key]; ok {
		close(wt.c)
		delete(w.ch, key)
	}
}

// Len is how many keys are waited on.
func (w *Waiters) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ch)
}

// Wait waits for a Wake of key (on a channel taken before the record was
// read, so no wake is missed), for the lease to run out after d (its end
// less the store's Clock.Now), or for ctx.
func Wait(ctx context.Context, woken <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-woken:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
