package memory

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestWaitersReleased: a wait that returns without a wake-up (the log had
// finished, or never was; the record had completed; the waiter gave up)
// leaves nothing behind. Each such wait used to keep its key's channel for
// good: one in 500 detached batches attached to as they finished left one.
func TestWaitersReleased(t *testing.T) {
	ctx := context.Background()
	s := New(Options{})
	defer s.Close()
	for i := range 100 {
		name := fmt.Sprint("log", i)
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour, []byte("a")); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, name, "o", time.Hour, []byte("z")); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitLog(ctx, name, 1); err != nil { // finished: at once
			t.Fatal(err)
		}
		if err := s.WaitLog(ctx, fmt.Sprint("none", i), 0); err != nil { // no such log: at once
			t.Fatal(err)
		}
		key := fmt.Sprint("key", i)
		if _, err := s.Claim(ctx, key, "fp", "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, key, "o", []byte("r"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx, key); err != nil { // completed: at once
			t.Fatal(err)
		}
	}
	// A waiter that gives up on a live log and a running call.
	if err := s.Open(ctx, "live", "o", time.Hour, time.Hour, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "running", "fp", "o", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := s.WaitLog(short, "live", 1); err == nil {
		t.Fatal("WaitLog on a live log with nothing new returned before its context ended")
	}
	if err := s.Wait(short, "running"); err == nil {
		t.Fatal("Wait on a running call returned before its context ended")
	}
	if n, m := s.waiters.Len(), s.logWaiters.Len(); n != 0 || m != 0 {
		t.Fatalf("after every wait returned, %d records' and %d logs' waiters are kept; want none", n, m)
	}
}
