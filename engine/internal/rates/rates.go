// Package rates keeps each caller's allowance of calls a second (token
// buckets, golang.org/x/time/rate), in this process or in a Store shared
// by replicas, and answers whether a batch of n calls may start now. It
// returns its own errors (*BurstError, *LimitedError); the engine maps
// them to its codes.
package rates

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Store keeps callers' allowances where every replica sees them (the
// engine's RateStore).
type Store interface {
	// TakeRate takes n calls from key's allowance of perSecond calls a
	// second, burst at once: it returns 0 when it took them, or how long
	// until it could, having taken nothing.
	TakeRate(ctx context.Context, key string, n int, perSecond float64, burst int) (time.Duration, error)
}

// storeTimeout bounds a Store's answer; past it, or on its error, the
// batch is let through (see Buckets.Take).
const storeTimeout = 500 * time.Millisecond

// maxIdleLimiters is how many callers' local allowances are kept before
// the full ones (which a new limiter would equal) are dropped.
const maxIdleLimiters = 4096

// Buckets are the callers' allowances.
type Buckets struct {
	perSecond float64
	burst     int
	shared    Store // nil: local
	log       *slog.Logger
	now       func() time.Time

	mu      sync.Mutex
	local   map[string]*rate.Limiter
	sweepAt int // len(local) at which the full allowances are next dropped
	sweeps  int // how many times they were; for tests

	logMu    sync.Mutex
	loggedAt time.Time // when the shared store's failure was last logged
}

// New returns allowances of perSecond calls a second (more than 0) and
// burst at once (0: perSecond rounded up, at least 1), kept in shared when
// it is not nil. A failure of shared is logged on log, at most every 10s.
func New(perSecond float64, burst int, shared Store, log *slog.Logger) *Buckets {
	if burst <= 0 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	return &Buckets{perSecond: perSecond, burst: burst, shared: shared, log: log, now: time.Now, local: make(map[string]*rate.Limiter), sweepAt: maxIdleLimiters}
}

// SetClock makes the allowances read the time from now instead of
// time.Now; call it before the first Take. The engine's tests step the
// refill with it rather than wait for it, which a loaded machine can make
// come early or late.
func (r *Buckets) SetClock(now func() time.Time) { r.now = now }

// BurstError refuses a batch of more calls than a caller may start at
// once: it could never be admitted, however long it waited.
type BurstError struct{ Calls, Burst int }

func (e *BurstError) Error() string {
	return fmt.Sprintf("the batch has %d calls; a caller may start at most %d at once (rate_burst): send them in smaller batches", e.Calls, e.Burst)
}

// LimitedError refuses a batch its caller's allowance cannot cover now;
// Wait is how long until it could.
type LimitedError struct {
	Wait      time.Duration
	PerSecond float64
	Burst     int
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("rate limit: this caller may start %s calls a second, %d at once; retry in %s", strconv.FormatFloat(e.PerSecond, 'g', -1, 64), e.Burst, e.Wait)
}

// Take takes n calls from caller's allowance, or returns the refusal: a
// *BurstError or a *LimitedError. Nothing is taken of a refused batch.
func (r *Buckets) Take(ctx context.Context, caller string, n int) error {
	if n > r.burst {
		return &BurstError{Calls: n, Burst: r.burst}
	}
	var wait time.Duration
	if r.shared != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		var err error
		wait, err = r.shared.TakeRate(sctx, strconv.Quote(caller), n, r.perSecond, r.burst)
		cancel()
		if err != nil {
			// Failing open: a rate store that is down must not take every
			// caller's service down with it.
			r.logFailure(err)
			return nil
		}
	} else {
		wait = r.takeLocal(caller, n)
	}
	if wait <= 0 {
		return nil
	}
	wait = wait.Round(time.Millisecond) + time.Millisecond // never "retry in 0s"
	return &LimitedError{Wait: wait, PerSecond: r.perSecond, Burst: r.burst}
}

// logFailure logs the shared store's failure, at most every 10s.
func (r *Buckets) logFailure(err error) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if now := r.now(); now.Sub(r.loggedAt) >= 10*time.Second {
		r.loggedAt = now
		r.log.Warn("the shared rate store failed; batches are let through unlimited until it answers", "error", err.Error())
	}
}

// takeLocal is Take on this process's allowances.
func (r *Buckets) takeLocal(caller string, n int) time.Duration {
	now := r.now()
	r.mu.Lock()
	lim, ok := r.local[caller]
	if !ok {
		if len(r.local) >= r.sweepAt {
			for k, l := range r.local {
				if l.TokensAt(now) >= float64(r.burst) {
					delete(r.local, k)
				}
			}
			// The next sweep waits until the map has doubled: with many
			// callers whose allowances are not full yet, sweeping at every
			// new caller past the bound cost a scan of them all each
			// (30,000 new callers at 0.1 a second: 15 s under the lock).
			r.sweepAt = max(maxIdleLimiters, 2*len(r.local))
			r.sweeps++
		}
		lim = rate.NewLimiter(rate.Limit(r.perSecond), r.burst)
		r.local[caller] = lim
	}
	r.mu.Unlock()
	res := lim.ReserveN(now, n)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}
