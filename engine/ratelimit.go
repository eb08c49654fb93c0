package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate limits are admission: before a batch is accepted, its calls are
// taken from its caller's allowance (Config.RatePerCaller calls a second,
// Config.RateBurst at once), and a batch whose calls the allowance cannot
// cover now is refused with ResourceExhausted and a google.rpc.RetryInfo
// saying when it could be. Nothing of a refused batch runs or is taken.
// The allowance lives in this process (per replica), or in a RateStore
// shared by replicas (Redis).

// RateStore keeps callers' allowances where every replica sees them.
type RateStore interface {
	// TakeRate takes n calls from key's allowance of perSecond calls a
	// second, burst at once: it returns 0 when it took them, or how long
	// until it could, having taken nothing.
	TakeRate(ctx context.Context, key string, n int, perSecond float64, burst int) (time.Duration, error)
}

// rateStoreTimeout bounds a RateStore's answer; past it, or on its error,
// the batch is let through (see rates.take).
const rateStoreTimeout = 500 * time.Millisecond

// rates is the engine's rate limiting.
type rates struct {
	perSecond float64
	burst     int
	shared    RateStore // nil: local
	log       func(err error)

	mu    sync.Mutex
	local map[string]*rate.Limiter
}

// maxIdleLimiters is how many callers' local allowances are kept before
// the full ones (which a new limiter would equal) are dropped.
const maxIdleLimiters = 4096

func newRates(cfg *Config) *rates {
	if cfg.RatePerCaller <= 0 {
		return nil
	}
	burst := cfg.RateBurst
	if burst <= 0 {
		burst = max(1, int(math.Ceil(cfg.RatePerCaller)))
	}
	r := &rates{perSecond: cfg.RatePerCaller, burst: burst, shared: cfg.RateStore, local: make(map[string]*rate.Limiter)}
	var mu sync.Mutex
	var last time.Time
	r.log = func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < 10*time.Second {
			return
		}
		last = time.Now()
		cfg.Logger.Warn("the shared rate store failed; batches are let through unlimited until it answers", "error", err.Error())
	}
	return r
}

// errBurst refuses a batch of more calls than a caller may start at once:
// it could never be admitted, however long it waited.
type errBurst struct{ calls, burst int }

func (e *errBurst) Error() string {
	return fmt.Sprintf("the batch has %d calls; a caller may start at most %d at once (rate_burst): send them in smaller batches", e.calls, e.burst)
}

// errRateLimited refuses a batch its caller's allowance cannot cover now;
// wait is how long until it could.
type errRateLimited struct {
	wait      time.Duration
	perSecond float64
	burst     int
}

func (e *errRateLimited) Error() string {
	return fmt.Sprintf("rate limit: this caller may start %s calls a second, %d at once; retry in %s", strconv.FormatFloat(e.perSecond, 'g', -1, 64), e.burst, e.wait)
}

// take takes n calls from caller's allowance, or returns the refusal: an
// *errBurst or an *errRateLimited.
func (r *rates) take(ctx context.Context, caller string, n int) error {
	if n > r.burst {
		return &errBurst{calls: n, burst: r.burst}
	}
	var wait time.Duration
	if r.shared != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rateStoreTimeout)
		var err error
		wait, err = r.shared.TakeRate(sctx, strconv.Quote(caller), n, r.perSecond, r.burst)
		cancel()
		if err != nil {
			// Failing open: a rate store that is down must not take every
			// caller's service down with it.
			r.log(err)
			return nil
		}
	} else {
		wait = r.takeLocal(caller, n)
	}
	if wait <= 0 {
		return nil
	}
	wait = wait.Round(time.Millisecond) + time.Millisecond // never "retry in 0s"
	return &errRateLimited{wait: wait, perSecond: r.perSecond, burst: r.burst}
}

// takeLocal is take on this process's allowances.
func (r *rates) takeLocal(caller string, n int) time.Duration {
	now := time.Now()
	r.mu.Lock()
	lim, ok := r.local[caller]
	if !ok {
		if len(r.local) >= maxIdleLimiters {
			for k, l := range r.local {
				if l.TokensAt(now) >= float64(r.burst) {
					delete(r.local, k)
				}
			}
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

// rateError is the *Error for take's refusal: InvalidArgument for a batch
// no allowance could ever cover, ResourceExhausted with a RetryInfo for
// one it cannot cover yet.
func rateError(err error) error {
	var limited *errRateLimited
	if errors.As(err, &limited) {
		return NewError(ResourceExhausted, err).RetryAfter(limited.wait)
	}
	return NewError(InvalidArgument, err)
}
