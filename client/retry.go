package client

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultRateLimitRetries is how many times a Client waits out a rate
// limit's refusal unless WithRateLimitRetries says otherwise.
const defaultRateLimitRetries = 3

// maxRetryWait is the longest delay a refusal's RetryInfo may give for the
// client to wait it out: a longer one (a server's say-so of days) is
// returned at once, its delay readable with RetryDelay, rather than
// holding the call for it.
const maxRetryWait = time.Minute

// WithRateLimitRetries sets how many times the client waits out a refusal
// that says when to retry (RESOURCE_EXHAUSTED with a google.rpc.RetryInfo,
// what a server's rate limit sends) and sends the batch or call again:
// such a refusal comes before anything ran, so sending it again is safe.
// It waits the delay the server gave, or until the context ends; a delay
// over a minute is not waited for, and the refusal is returned at once.
// Default 3; 0 returns the refusal at once.
func WithRateLimitRetries(n int) Option {
	return func(o *options) { o.rateRetries = max(n, 0) }
}

// RetryDelay returns the delay err's google.rpc.RetryInfo gives (a gRPC
// status error's detail, as a server's rate limit sends it), and whether
// it has one.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// waitToRetry reports whether the attempt-th refusal err (counting from 0)
// is to be retried, having waited the delay it gives; false when it is not
// a rate limit's, the retries are spent, or ctx ended first.
func (c *Client) waitToRetry(ctx context.Context, err error, attempt int) bool {
	if attempt >= c.rateRetries || status.Code(err) != codes.ResourceExhausted {
		return false
	}
	d, ok := RetryDelay(err)
	if !ok || d > maxRetryWait {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
