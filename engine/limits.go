package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolwire/toolwire/engine/internal/rates"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// Call slots (engine/internal/slots) bound the tool calls running at once,
// server-wide (MaxConcurrentCalls) and per caller (MaxCallsPerCaller). A
// batch reserves one before it is accepted; each of its calls takes one
// on its path (slotTaken) and gives it back when its tool returns.

// reserve takes a slot for the batch's first call, waiting up to
// MaxQueueWait: once a batch is accepted every call must get a result, so a
// wait that ends in an error for the caller can only happen before. A server or caller
// at its limit for that long gets ResourceExhausted and retries with
// backoff or on another replica.
func (b *batch) reserve(ctx context.Context) error {
	cs, err := b.e.limits.Acquire(ctx, CallerFrom(ctx), b.e.cfg.MaxQueueWait)
	if err != nil {
		switch {
		case errors.Is(context.Cause(ctx), errShutdown):
			return errorf(Unavailable, "server is shutting down; retry on another replica")
		case ctx.Err() != nil:
			return contextError(ctx.Err())
		}
		return errorf(ResourceExhausted, "%v and none finished within %s; retry with backoff", err, b.e.cfg.MaxQueueWait)
	}
	b.reserved.Hold(cs)
	return nil
}

// dropReserved gives back the reserved slot if no call claimed it.
func (b *batch) dropReserved() { b.reserved.Release(b.e.limits) }

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
	if b.reserved.Pass(&c.slot) {
		return nil
	}
	deadline, _, _ := b.deadline(i, time.Now())
	wait := time.Until(deadline)
	cs, err := b.e.limits.Acquire(ctx, CallerFrom(b.callerCtx), wait)
	switch {
	case err == nil:
		c.slot.Hold(cs)
		return nil
	case ctx.Err() != nil:
		kind, msg := cancelled(ctx)
		return b.failure(i, kind, msg+" while the call waited for a free slot; nothing was run")
	default:
		return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT,
			fmt.Sprintf("timed out waiting %s for a free slot: %v. Nothing was run; the call may be retried later.", wait.Round(time.Millisecond), err))
	}
}

// Rate limits are admission: before a batch is accepted, its calls are
// taken from its caller's allowance (Config.RatePerCaller calls a second,
// Config.RateBurst at once), and a batch whose calls the allowance cannot
// cover now is refused with ResourceExhausted and a google.rpc.RetryInfo
// saying when it could be. Nothing of a refused batch runs or is taken.
// The allowance lives in this process (per replica), or in a RateStore
// shared by replicas (Redis); engine/internal/rates keeps it.

// RateStore keeps callers' allowances where every replica sees them.
type RateStore interface {
	// TakeRate takes n calls from key's allowance of perSecond calls a
	// second, burst at once: it returns 0 when it took them, or how long
	// until it could, having taken nothing.
	TakeRate(ctx context.Context, key string, n int, perSecond float64, burst int) (time.Duration, error)
}

// rateError is the *Error for the rate buckets' refusal
// (engine/internal/rates): InvalidArgument for a batch no allowance could
// ever cover, ResourceExhausted with a RetryInfo for one it cannot cover
// yet.
func rateError(err error) error {
	var limited *rates.LimitedError
	if errors.As(err, &limited) {
		return NewError(ResourceExhausted, err).RetryAfter(limited.Wait)
	}
	return NewError(InvalidArgument, err)
}
