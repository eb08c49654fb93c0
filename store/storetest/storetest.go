// Package storetest holds the contracts store backends pass, one suite per
// interface: Idempotency for store.Idempotency, Vars for store.Vars,
// Signals for store.Signals and EventLog for store.EventLog. A backend's tests run the suite of every interface it
// implements. It imports no backend.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store"
)

// Option adjusts a suite.
type Option func(*config)

type config struct {
	advance    func(time.Duration)
	maxEntries int
	restart    func()
}

// WithMaxLogEntries tells the EventLog suite that open makes stores keeping
// n entries per log, so it checks what happens past them.
func WithMaxLogEntries(n int) Option {
	return func(c *config) { c.maxEntries = n }
}

// WithAdvance makes a suite let time pass with advance instead of sleeping, for
// stores whose clock is simulated (miniredis's FastForward).
func WithAdvance(advance func(time.Duration)) Option {
	return func(c *config) { c.advance = advance }
}

const (
	long  = time.Hour
	short = 100 * time.Millisecond
)

func newConfig(opts []Option) config {
	c := config{advance: time.Sleep}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Idempotency runs the idempotency records' contract against stores made
// by open, one per subtest; open should register their Close with
// t.Cleanup.
func Idempotency[S store.Idempotency](t *testing.T, open func(t *testing.T) S, opts ...Option) {
	c := newConfig(opts)
	ctx := context.Background()
	claim := func(t *testing.T, s S, key, fp, owner string, lease, ttl time.Duration, want store.State) store.Claim {
		t.Helper()
		got, err := s.Claim(ctx, key, fp, owner, lease, ttl)
		if err != nil {
			t.Fatalf("Claim(%q, %q, %q): %v", key, fp, owner, err)
		}
		if got.State != want {
			t.Fatalf("Claim(%q, %q, %q) = %v, want %v", key, fp, owner, got.State, want)
		}
		return got
	}
	isLost := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("%s = %v, want ErrLeaseLost", what, err)
		}
	}

	t.Run("ClaimThenInFlight", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", long, long, store.Claimed)
		claim(t, s, "k", "fp", "b", long, long, store.InFlight)
		claim(t, s, "k", "fp", "a", long, long, store.InFlight) // even its owner does not claim twice
		claim(t, s, "other", "fp", "b", long, long, store.Claimed)
	})
	t.Run("CompleteThenReplay", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", long, long, store.Claimed)
		result := []byte("result\x00\xff bytes")
		must(t, s.Complete(ctx, "k", "a", result, long))
		got := claim(t, s, "k", "fp", "b", long, long, store.Completed)
		if !bytes.Equal(got.Result, result) {
			t.Fatalf("replayed result = %q, want %q", got.Result, result)
		}
		isLost(t, "Complete twice", s.Complete(ctx, "k", "a", []byte("again"), long))
		got = claim(t, s, "k", "fp", "c", long, long, store.Completed)
		if !bytes.Equal(got.Result, result) {
			t.Fatalf("result after a second Complete = %q, want the first %q", got.Result, result)
		}
	})
	t.Run("Conflict", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp1", "a", long, long, store.Claimed)
		claim(t, s, "k", "fp2", "b", long, long, store.Conflict)
		must(t, s.Complete(ctx, "k", "a", []byte("r"), long))
		claim(t, s, "k", "fp2", "b", long, long, store.Conflict)
		claim(t, s, "k", "fp1", "b", long, long, store.Completed)
	})
	t.Run("Release", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", long, long, store.Claimed)
		isLost(t, "Release by another owner", s.Release(ctx, "k", "b"))
		claim(t, s, "k", "fp", "b", long, long, store.InFlight)
		must(t, s.Release(ctx, "k", "a"))
		// A released call runs again, with any arguments.
		claim(t, s, "k", "fp2", "b", long, long, store.Claimed)
		isLost(t, "Release after Release", s.Release(ctx, "k", "a"))
	})
	t.Run("RenewByOwnerOnly", func(t *testing.T) {
		s := open(t)
		// A first lease of five shorts, not one: on a real clock the
		// renewal must land within it, and a loaded machine took longer
		// than 100 ms at times.
		claim(t, s, "k", "fp", "a", 5*short, long, store.Claimed)
		must(t, s.Renew(ctx, "k", "a", long))
		isLost(t, "Renew by another owner", s.Renew(ctx, "k", "b", long))
		c.advance(6 * short)
		claim(t, s, "k", "fp", "b", long, long, store.InFlight) // renewed past the first lease
	})
	t.Run("ExpiredLeaseTakenOver", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", short, long, store.Claimed)
		c.advance(3 * short)
		claim(t, s, "k", "fp", "b", long, long, store.Claimed)
		isLost(t, "Complete by the dead owner", s.Complete(ctx, "k", "a", []byte("late"), long))
		isLost(t, "Renew by the dead owner", s.Renew(ctx, "k", "a", long))
		isLost(t, "Release by the dead owner", s.Release(ctx, "k", "a"))
		must(t, s.Complete(ctx, "k", "b", []byte("b's"), long))
		if got := claim(t, s, "k", "fp", "c", long, long, store.Completed); string(got.Result) != "b's" {
			t.Fatalf("result = %q, want the new owner's", got.Result)
		}
	})
	t.Run("ExpiredLeaseWithOtherArguments", func(t *testing.T) {
		// A call that never completed recorded nothing to conflict with.
		s := open(t)
		claim(t, s, "k", "fp1", "a", short, long, store.Claimed)
		c.advance(3 * short)
		claim(t, s, "k", "fp2", "b", long, long, store.Claimed)
	})
	t.Run("CompleteAfterLeaseRanOutUntaken", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", short, long, store.Claimed)
		c.advance(3 * short)
		must(t, s.Complete(ctx, "k", "a", []byte("r"), long))
		claim(t, s, "k", "fp", "b", long, long, store.Completed)
	})
	t.Run("RecordExpires", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", long, long, store.Claimed)
		must(t, s.Complete(ctx, "k", "a", []byte("r"), short))
		c.advance(3 * short)
		claim(t, s, "k", "fp2", "b", long, long, store.Claimed)
	})
	t.Run("WaitBlocksWhileInFlight", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", long, long, store.Claimed)
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := s.Wait(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on a call in flight = %v, want the context's deadline", err)
		}
		if err := s.Wait(ctx, "absent"); err != nil {
			t.Fatalf("Wait on no record = %v", err)
		}
	})
	t.Run("WaitWakesOnComplete", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", long, long, store.Claimed)
		waited := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			for {
				if err := s.Wait(wctx, "k"); err != nil {
					waited <- err
					return
				}
				got, err := s.Claim(wctx, "k", "fp", "b", long, long)
				if err != nil || got.State != store.InFlight {
					if err == nil && got.State != store.Completed {
						err = fmt.Errorf("after Wait, Claim = %v, want completed", got.State)
					}
					waited <- err
					return
				}
			}
		}()
		must(t, s.Complete(ctx, "k", "a", []byte("r"), long))
		must(t, <-waited)
	})
	t.Run("WaitWakesOnLeaseExpiry", func(t *testing.T) {
		s := open(t)
		claim(t, s, "k", "fp", "a", short, long, store.Claimed)
		waited := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			waited <- s.Wait(wctx, "k")
		}()
		c.advance(3 * short)
		must(t, <-waited)
		claim(t, s, "k", "fp", "b", long, long, store.Claimed)
	})
	t.Run("ConcurrentClaimsOneWinner", func(t *testing.T) {
		s := open(t)
		const n = 50
		states := make(chan store.State, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got, err := s.Claim(ctx, "k", "fp", fmt.Sprint("owner", i), long, long)
				if err != nil {
					t.Error(err)
				}
				states <- got.State
			})
		}
		wg.Wait()
		close(states)
		count := map[store.State]int{}
		for st := range states {
			count[st]++
		}
		if count[store.Claimed] != 1 || count[store.InFlight] != n-1 {
			t.Fatalf("claims = %v, want one claimed and %d in flight", count, n-1)
		}
	})
}

// Vars runs the scoped variables' contract against stores made by open,
// one per subtest; open should register their Close with t.Cleanup.
func Vars[S store.Vars](t *testing.T, open func(t *testing.T) S, opts ...Option) {
	c := newConfig(opts)
	ctx := context.Background()
	t.Run("Vars", func(t *testing.T) {
		s := open(t)
		get := func(scope, name string) (string, bool) {
			t.Helper()
			v, ok, err := s.GetVar(ctx, scope, name)
			must(t, err)
			return string(v), ok
		}
		if v, ok := get("s", "x"); ok {
			t.Fatalf("unset variable = %q, want none", v)
		}
		must(t, s.SetVar(ctx, "s", "x", []byte(`{"n":1}`), long))
		must(t, s.SetVar(ctx, "a", "bc", []byte(`"a/bc"`), long))
		must(t, s.SetVar(ctx, "ab", "c", []byte(`"ab/c"`), long))
		if v, ok := get("s", "x"); !ok || v != `{"n":1}` {
			t.Fatalf("variable = %q, %v; want {\"n\":1}", v, ok)
		}
		if v, _ := get("a", "bc"); v != `"a/bc"` {
			t.Fatalf("scope a, name bc = %q: scopes are not kept apart", v)
		}
		if v, _ := get("ab", "c"); v != `"ab/c"` {
			t.Fatalf("scope ab, name c = %q: scopes are not kept apart", v)
		}
		if _, ok := get("other", "x"); ok {
			t.Fatal("a variable is visible in another scope")
		}
		must(t, s.SetVar(ctx, "s", "x", []byte(`2`), long))
		if v, _ := get("s", "x"); v != `2` {
			t.Fatalf("overwritten variable = %q, want 2", v)
		}
		must(t, s.DeleteVar(ctx, "s", "x"))
		must(t, s.DeleteVar(ctx, "s", "x"))
		if _, ok := get("s", "x"); ok {
			t.Fatal("deleted variable is still set")
		}
	})
	t.Run("AddVar", func(t *testing.T) {
		s := open(t)
		add := func(v string) bool {
			t.Helper()
			added, err := s.AddVar(ctx, "s", "x", []byte(v), short)
			must(t, err)
			return added
		}
		if !add(`1`) {
			t.Fatal("AddVar of an unset variable did not add it")
		}
		if add(`2`) {
			t.Fatal("AddVar of a set variable added it")
		}
		if v, _, err := s.GetVar(ctx, "s", "x"); err != nil || string(v) != `1` {
			t.Fatalf("after a second AddVar the variable is %q (%v); want the first, 1", v, err)
		}
		c.advance(3 * short)
		if !add(`3`) {
			t.Fatal("AddVar of an expired variable did not add it")
		}
		// Of many adding at once, one adds it.
		var wg sync.WaitGroup
		var n atomic.Int32
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if added, err := s.AddVar(ctx, "race", "x", []byte(strconv.Itoa(i)), long); err == nil && added {
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		if n.Load() != 1 {
			t.Fatalf("16 AddVars at once: %d added; want 1", n.Load())
		}
	})
	t.Run("VarExpires", func(t *testing.T) {
		s := open(t)
		must(t, s.SetVar(ctx, "s", "x", []byte(`1`), short))
		must(t, s.SetVar(ctx, "s", "y", []byte(`1`), long))
		c.advance(3 * short)
		if _, ok, err := s.GetVar(ctx, "s", "x"); err != nil || ok {
			t.Fatalf("expired variable: ok=%v err=%v, want gone", ok, err)
		}
		if _, ok, err := s.GetVar(ctx, "s", "y"); err != nil || !ok {
			t.Fatalf("live variable: ok=%v err=%v, want set", ok, err)
		}
	})
}
