package rates

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// TestBuckets drives the local allowances on a clock of the test's own: a
// caller's burst starts at once, the next call waits for the refill and is
// told how long, a batch over the burst can never start, and callers do
// not share allowances.
func TestBuckets(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_000_000, 0)
	r := New(20, 3, nil, slog.New(slog.DiscardHandler))
	r.now = func() time.Time { return clock }
	ctx := context.Background()
	if err := r.Take(ctx, "alice", 3); err != nil {
		t.Fatalf("the burst: %v", err)
	}
	var limited *LimitedError
	err := r.Take(ctx, "alice", 1)
	if !errors.As(err, &limited) || limited.Wait != 51*time.Millisecond || limited.PerSecond != 20 || limited.Burst != 3 {
		t.Fatalf("past the allowance: %v; want a LimitedError of 51ms (one interval, rounded up)", err)
	}
	if got, want := err.Error(), "rate limit: this caller may start 20 calls a second, 3 at once; retry in 51ms"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	var burst *BurstError
	if err := r.Take(ctx, "alice", 4); !errors.As(err, &burst) || burst.Calls != 4 || burst.Burst != 3 {
		t.Errorf("a batch over the burst: %v", err)
	}
	if err := r.Take(ctx, "bob", 3); err != nil {
		t.Errorf("bob's own allowance: %v", err)
	}
	clock = clock.Add(50 * time.Millisecond)
	if err := r.Take(ctx, "alice", 1); err != nil {
		t.Errorf("after one interval: %v", err)
	}
}

func TestBurstDefaultsToTheRateRoundedUp(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rate float64
		want int
	}{{0.5, 1}, {2.5, 3}, {10, 10}} {
		if got := New(tt.rate, 0, nil, slog.New(slog.DiscardHandler)).burst; got != tt.want {
			t.Errorf("rate %g: burst %d, want %d", tt.rate, got, tt.want)
		}
	}
}

// TestManyCallersSweepRarely: callers whose allowances are not full again
// cannot be dropped; past maxIdleLimiters of them the full ones are looked
// for only each time the map has doubled, not at every new caller, which
// scanned them all each time (30,000 new callers at 0.1 a second took 15 s
// under the lock, now 54 ms). Once their allowances are full they go at
// the next sweep.
func TestManyCallersSweepRarely(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_000_000, 0)
	r := New(0.1, 1, nil, slog.New(slog.DiscardHandler))
	r.now = func() time.Time { return clock }
	ctx := context.Background()
	const callers = 8 * maxIdleLimiters
	for i := range callers {
		if err := r.Take(ctx, fmt.Sprint("caller", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if r.sweeps > 4 {
		t.Errorf("%d new callers, none full again, swept the allowances %d times; want once each time they doubled", callers, r.sweeps)
	}
	clock = clock.Add(time.Minute) // every allowance is full again
	for i := range 2 * callers {
		if err := r.Take(ctx, fmt.Sprint("later", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.local); n > 2*callers+1 {
		t.Errorf("%d allowances kept after the first callers' were full again, want at most %d", n, 2*callers+1)
	}
	if err := r.Take(ctx, "later0", 1); err == nil {
		t.Error("a caller whose allowance is spent was let through: its limiter was dropped while not full")
	}
}
