package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRateLimitPerCaller: a caller's batches are admitted while its
// allowance covers their calls; past it a batch is refused, before
// anything runs, with ResourceExhausted and a RetryInfo that is enough to
// wait; a batch larger than the burst can never fit and is
// InvalidArgument; other callers have allowances of their own. The
// buckets read a clock the test steps: on the wall clock, a first batch
// that took longer than the refill interval (a loaded machine) let the
// next one through.
func TestRateLimitPerCaller(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{RatePerCaller: 2, RateBurst: 3})
	var clock atomic.Int64 // Unix nanoseconds
	clock.Store(time.Now().UnixNano())
	te.e.rates.SetClock(func() time.Time { return time.Unix(0, clock.Load()) })
	echo := func(n int) []string {
		var cs []string
		for range n {
			cs = append(cs, "echo")
		}
		return cs
	}
	run := func(caller string, n int) error {
		var req = calls()
		for i, name := range echo(n) {
			req.Calls = append(req.Calls, call(string(rune('a'+i)), name, `{"text":"x"}`))
		}
		_, err := te.runErr(as(caller), req)
		return err
	}
	if err := run("alice", 3); err != nil {
		t.Fatalf("the burst: %v", err)
	}
	ran := te.e.Stats()
	err := run("alice", 1)
	d, ok := RetryDelay(err)
	if CodeOf(err) != ResourceExhausted || !ok || d <= 0 || d > 510*time.Millisecond || !strings.Contains(err.Error(), "rate limit: this caller may start 2 calls a second, 3 at once; retry in") {
		t.Fatalf("past the allowance: %v (retry %v %v); want ResourceExhausted with RetryInfo of at most one interval", err, d, ok)
	}
	if after := te.e.Stats(); after != ran {
		t.Errorf("a refused batch changed the engine's counts: %+v -> %+v", ran, after)
	}
	if err := run("alice", 4); CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), "at most 3 at once (rate_burst)") {
		t.Errorf("a batch over the burst: %v", err)
	}
	if err := run("bob", 3); err != nil {
		t.Errorf("bob's own allowance: %v", err)
	}
	clock.Add(int64(d))
	if err := run("alice", 1); err != nil {
		t.Errorf("after the RetryInfo's delay: %v", err)
	}
}

// fakeRates is a RateStore that answers wait, or fails.
type fakeRates struct {
	wait  time.Duration
	fail  bool
	asked atomic.Int32
	key   atomic.Value
}

func (f *fakeRates) TakeRate(_ context.Context, key string, n int, perSecond float64, burst int) (time.Duration, error) {
	f.asked.Add(1)
	f.key.Store(key)
	if f.fail {
		return 0, errors.New("connection refused")
	}
	return f.wait, nil
}

// TestRateStore: with a RateStore, the shared allowance decides (keyed by
// the caller); a store that fails lets batches through rather than
// refusing every caller.
func TestRateStore(t *testing.T) {
	t.Parallel()
	full := &fakeRates{wait: 250 * time.Millisecond}
	te := newTestBedWith(t, Config{RatePerCaller: 1000}, Deps{RateStore: full})
	_, err := te.runErr(as("alice"), calls(call("a", "echo", `{"text":"x"}`)))
	if d, ok := RetryDelay(err); CodeOf(err) != ResourceExhausted || !ok || d < 250*time.Millisecond {
		t.Errorf("the shared store says wait: %v (%v)", err, d)
	}
	if k, _ := full.key.Load().(string); k != `"alice"` {
		t.Errorf("the store was asked for key %q", k)
	}
	down := &fakeRates{fail: true}
	te = newTestBedWith(t, Config{RatePerCaller: 1000}, Deps{RateStore: down})
	if _, err := te.runErr(as("alice"), calls(call("a", "echo", `{"text":"x"}`))); err != nil || down.asked.Load() != 1 {
		t.Errorf("with the store down: %v (asked %d); want the batch through", err, down.asked.Load())
	}
}
