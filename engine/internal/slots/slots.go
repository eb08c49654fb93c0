// Package slots bounds the tool calls running at once, server-wide and per
// caller (Limiter), and keeps the slot a call or a batch holds (Slot).
// Waiters queue in channels, which wake blocked senders first come, first
// served.
package slots

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter bounds the calls running at once, server-wide and per caller.
type Limiter struct {
	global    chan struct{}
	perCaller int  // 0: no per-caller cap
	anonymous bool // the per-caller cap applies to the anonymous caller ("") too

	mu      sync.Mutex
	callers map[string]*Caller // callers holding or waiting for a slot

	waiting atomic.Int64 // calls and batches waiting for a slot
}

// Caller is one caller's share of the slots, while it holds or waits for
// one.
type Caller struct {
	name string
	sem  chan struct{}
	refs int // holders and waiters; the entry goes when none are left
}

// New returns a limiter of global slots, of which each caller may hold
// perCaller (0: no per-caller cap); anonymous says whether that cap
// applies to the anonymous caller ("") too.
func New(global, perCaller int, anonymous bool) *Limiter {
	return &Limiter{global: make(chan struct{}, global), perCaller: perCaller, anonymous: anonymous, callers: make(map[string]*Caller)}
}

// BusyError is a wait for a slot that ran out of time.
type BusyError struct {
	PerCaller bool // the caller's own cap was the limit, not the server's
	Limit     int
}

func (e *BusyError) Error() string {
	if e.PerCaller {
		return fmt.Sprintf("this caller is running its limit of %d concurrent calls", e.Limit)
	}
	return fmt.Sprintf("the server is running its limit of %d concurrent calls", e.Limit)
}

// Acquire takes a slot for caller, waiting at most wait (and while ctx
// lasts): the caller's own first, so a caller's queue holds no server-wide
// slot. It returns what Release needs to give the slot back (nil without a
// per-caller cap), or a *BusyError or ctx's error.
func (l *Limiter) Acquire(ctx context.Context, caller string, wait time.Duration) (*Caller, error) {
	var timer *time.Timer // made only when a wait is needed; shared by both waits
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	take := func(sem chan struct{}) bool {
		select {
		case sem <- struct{}{}:
			return true
		default:
		}
		if timer == nil {
			timer = time.NewTimer(max(wait, 0))
		}
		l.waiting.Add(1)
		defer l.waiting.Add(-1)
		select {
		case sem <- struct{}{}:
			return true
		case <-timer.C:
		case <-ctx.Done():
		}
		return false
	}
	busy := func(perCaller bool, limit int) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &BusyError{PerCaller: perCaller, Limit: limit}
	}
	var cs *Caller
	if l.perCaller > 0 && (caller != "" || l.anonymous) {
		cs = l.caller(caller)
		if !take(cs.sem) {
			l.unref(cs)
			return nil, busy(true, l.perCaller)
		}
	}
	if !take(l.global) {
		if cs != nil {
			<-cs.sem
			l.unref(cs)
		}
		return nil, busy(false, cap(l.global))
	}
	return cs, nil
}

// Release gives back a slot Acquire took.
func (l *Limiter) Release(cs *Caller) {
	<-l.global
	if cs != nil {
		<-cs.sem
		l.unref(cs)
	}
}

func (l *Limiter) caller(name string) *Caller {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := l.callers[name]
	if cs == nil {
		cs = &Caller{name: name, sem: make(chan struct{}, l.perCaller)}
		l.callers[name] = cs
	}
	cs.refs++
	return cs
}

func (l *Limiter) unref(cs *Caller) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cs.refs--; cs.refs == 0 {
		delete(l.callers, cs.name)
	}
}

// Running is the number of slots taken.
func (l *Limiter) Running() int { return len(l.global) }

// Waiting is the number of calls and batches waiting for a slot.
func (l *Limiter) Waiting() int64 { return l.waiting.Load() }

// Callers is the number of callers holding or waiting for a per-caller
// slot.
func (l *Limiter) Callers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.callers)
}

// Slot is a slot held. Its Release is idempotent, because a call's slot is
// given back as soon as its tool returns and again, as a backstop, when
// the call's goroutine is done with it.
type Slot struct {
	cs   *Caller
	held atomic.Bool
}

// Hold makes s hold the slot Acquire returned cs for.
func (s *Slot) Hold(cs *Caller) {
	s.cs = cs
	s.held.Store(true)
}

// Release gives the slot back to l, once.
func (s *Slot) Release(l *Limiter) {
	if s.held.CompareAndSwap(true, false) {
		l.Release(s.cs)
	}
}

// Pass hands the slot s holds to to, and reports whether s held one; s
// holds none after.
func (s *Slot) Pass(to *Slot) bool {
	if !s.held.CompareAndSwap(true, false) {
		return false
	}
	to.Hold(s.cs)
	return true
}
