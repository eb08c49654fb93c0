package slots

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLimiterGivesBackWhatItTakes(t *testing.T) {
	t.Parallel()
	l := New(2, 1, true)
	ctx := context.Background()
	a, err := l.Acquire(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	var busy *BusyError
	if _, err := l.Acquire(ctx, "a", 0); !errors.As(err, &busy) || !busy.PerCaller || busy.Limit != 1 {
		t.Errorf("a's second slot: err = %v, want a per-caller BusyError of limit 1", err)
	}
	b, err := l.Acquire(ctx, "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "c", 0); !errors.As(err, &busy) || busy.PerCaller || busy.Limit != 2 {
		t.Errorf("third caller over the global cap: err = %v, want the server's BusyError of limit 2", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Acquire(cancelled, "c", time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: err = %v, want context.Canceled", err)
	}
	if l.Running() != 2 || l.Callers() != 2 {
		t.Errorf("holding two: Running %d, Callers %d; want 2, 2", l.Running(), l.Callers())
	}
	l.Release(a)
	l.Release(b)
	if l.Running() != 0 || l.Callers() != 0 || l.Waiting() != 0 {
		t.Errorf("after release: %d global slots taken, %d callers tracked, %d waiting", l.Running(), l.Callers(), l.Waiting())
	}
}

func TestSlotReleasesOnceAndPasses(t *testing.T) {
	t.Parallel()
	l := New(1, 0, false)
	cs, err := l.Acquire(context.Background(), "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	var reserved, call Slot
	reserved.Hold(cs)
	if !reserved.Pass(&call) || reserved.Pass(&call) {
		t.Fatal("Pass: want true for the held slot, then false")
	}
	reserved.Release(l) // holds nothing now: gives nothing back
	if l.Running() != 1 {
		t.Fatalf("Running %d after releasing a slot passed on, want 1", l.Running())
	}
	call.Release(l)
	call.Release(l) // a backstop: gives nothing back twice
	if l.Running() != 0 {
		t.Errorf("Running %d after release, want 0", l.Running())
	}
}
