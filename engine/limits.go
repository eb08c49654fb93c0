package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// limiter bounds the calls running at once, server-wide and per caller.
// Waiters queue in the channels, which wake blocked senders first come,
// first served.
type limiter struct {
	global    chan struct{}
	perCaller int  // 0: no per-caller cap
	anonymous bool // the per-caller cap applies to the anonymous caller ("") too

	mu      sync.Mutex
	callers map[string]*callerSlots // callers holding or waiting for a slot

	waiting atomic.Int64 // calls and batches waiting for a slot
}

type callerSlots struct {
	name string
	sem  chan struct{}
	refs int // holders and waiters; the entry goes when none are left
}

func newLimiter(global, perCaller int, anonymous bool) *limiter {
	return &limiter{global: make(chan struct{}, global), perCaller: perCaller, anonymous: anonymous, callers: make(map[string]*callerSlots)}
}

// errBusy is a wait for a slot that ran out of time.
type errBusy struct {
	perCaller bool
	limit     int
}

func (e *errBusy) Error() string {
	if e.perCaller {
		return fmt.Sprintf("this caller is running its limit of %d concurrent calls", e.limit)
	}
	return fmt.Sprintf("the server is running its limit of %d concurrent calls", e.limit)
}

// acquire takes a slot for caller, waiting at most wait (and while ctx
// lasts): the caller's own first, so a caller's queue holds no server-wide
// slot. It returns what release needs to give the slot back (nil without a
// per-caller cap), or an *errBusy or ctx's error.
func (l *limiter) acquire(ctx context.Context, caller string, wait time.Duration) (*callerSlots, error) {
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
		return &errBusy{perCaller: perCaller, limit: limit}
	}
	var cs *callerSlots
	if l.perCaller > 0 && (caller != "" || l.anonymous) {
		cs = l.callerSlots(caller)
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

// release gives back a slot acquire took.
func (l *limiter) release(cs *callerSlots) {
	<-l.global
	if cs != nil {
		<-cs.sem
		l.unref(cs)
	}
}

func (l *limiter) callerSlots(caller string) *callerSlots {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := l.callers[caller]
	if cs == nil {
		cs = &callerSlots{name: caller, sem: make(chan struct{}, l.perCaller)}
		l.callers[caller] = cs
	}
	cs.refs++
	return cs
}

func (l *limiter) unref(cs *callerSlots) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cs.refs--; cs.refs == 0 {
		delete(l.callers, cs.name)
	}
}

// slot is a call slot a batch holds. Its release is idempotent, because a
// call's slot is given back as soon as its tool returns and again, as a
// backstop, when the call's goroutine is done with it.
type slot struct {
	cs   *callerSlots
	held atomic.Bool
}

func (s *slot) hold(cs *callerSlots) {
	s.cs = cs
	s.held.Store(true)
}

func (s *slot) release(l *limiter) {
	if s.held.CompareAndSwap(true, false) {
		l.release(s.cs)
	}
}

// reserve takes a slot for the batch's first call, waiting up to
// MaxQueueWait: once a batch is accepted every call must get a result, so a
// wait that ends in an error for the caller can only happen before. A server or caller
// at its limit for that long gets ResourceExhausted and retries with
// backoff or on another replica.
func (b *batch) reserve(ctx context.Context) error {
	cs, err := b.e.limits.acquire(ctx, CallerFrom(ctx), b.e.cfg.MaxQueueWait)
	if err != nil {
		switch {
		case errors.Is(context.Cause(ctx), errShutdown):
			return errorf(Unavailable, "server is shutting down; retry on another replica")
		case ctx.Err() != nil:
			return contextError(ctx.Err())
		}
		return errorf(ResourceExhausted, "%v and none finished within %s; retry with backoff", err, b.e.cfg.MaxQueueWait)
	}
	b.reserved.hold(cs)
	return nil
}

// dropReserved gives back the reserved slot if no call claimed it.
func (b *batch) dropReserved() { b.reserved.release(b.e.limits) }

// slotTaken takes a slot for call i of an accepted batch: the batch's
// reserved one when it is still unclaimed, else one from the limiter,
// waiting up to the call's timeout (and the caller's deadline less the
// margin). Time spent waiting does not count against the tool's own
// timeout. When no slot comes the call ends with TIMEOUT, or CANCELLED
// when the batch ends; nothing was run, so the call may be retried. The
// slot goes back when the tool returns (callRun.run); an abandoned tool
// keeps it until then, so a caller cannot stack tools that ignore
// cancellation beyond its share of slots.
func slotTaken(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	c := &b.calls[i]
	if b.reserved.held.CompareAndSwap(true, false) {
		c.slot.hold(b.reserved.cs)
		return nil
	}
	deadline, _, _ := b.deadline(i, time.Now())
	wait := time.Until(deadline)
	cs, err := b.e.limits.acquire(ctx, CallerFrom(b.callerCtx), wait)
	switch {
	case err == nil:
		c.slot.hold(cs)
		return nil
	case ctx.Err() != nil:
		kind, msg := cancelled(ctx)
		return b.failure(i, kind, msg+" while the call waited for a free slot; nothing was run")
	default:
		return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT,
			fmt.Sprintf("timed out waiting %s for a free slot: %v. Nothing was run; the call may be retried later.", wait.Round(time.Millisecond), err))
	}
}
