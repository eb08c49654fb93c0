package engine

import (
	"context"
	"errors"
	"time"

	"github.com/toolwire/toolwire/engine/internal/rates"
)

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
