package sequence

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

// TestEnterErrors: a session with maxWaiting calls waiting refuses the
// next with a FullError; a call whose context ends while it waits leaves
// with the context's error, and the queue lets the calls behind it go.
func TestEnterErrors(t *testing.T) {
	t.Parallel()
	var s Sequencer
	ctx := context.Background()
	done, err := s.Enter(ctx, "o", "k", false, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := s.Enter(waitCtx, "o", "k", false, 4, 1)
		left <- err
	}()
	for s.WaitingIn("k") != 1 {
		runtime.Gosched() // the goroutine above has not queued yet
	}
	var full *FullError
	if _, err := s.Enter(ctx, "o", "k", true, 4, 1); !errors.As(err, &full) || full.Waiting != 1 || full.Limit != 1 {
		t.Errorf("a call beyond maxWaiting: %v, want FullError{1, 1}", err)
	}
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Errorf("a waiter whose context ended: %v, want context.Canceled", err)
	}
	if n := s.WaitingIn("k"); n != 0 {
		t.Errorf("%d calls wait after the cancelled one left, want 0", n)
	}
	done()
	done() // once only
	if n := s.Sessions(); n != 0 {
		t.Errorf("%d sessions left after every call ended, want 0", n)
	}
}

// TestOwnerBound: an owner's calls waiting in all its sessions together
// are bounded as one session's are; another owner is not held by it, and
// a call that leaves the queue gives its place back.
func TestOwnerBound(t *testing.T) {
	t.Parallel()
	var s Sequencer
	ctx, cancel := context.WithCancel(context.Background())
	var dones []func()
	left := make(chan error, 2)
	for _, key := range []string{"k1", "k2"} {
		done, err := s.Enter(ctx, "o", key, false, 4, 2)
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
		go func() {
			_, err := s.Enter(ctx, "o", key, false, 4, 2)
			left <- err
		}()
	}
	for s.WaitingOf("o") != 2 {
		runtime.Gosched() // the goroutines above have not queued yet
	}
	var full *FullError
	// With a context already ended: refused, it says so; queued, it
	// would leave at once with the context's error.
	ended, end := context.WithCancel(context.Background())
	end()
	if _, err := s.Enter(ended, "o", "k1", false, 4, 2); !errors.As(err, &full) || !full.Owner || full.Waiting != 2 || full.Limit != 2 {
		t.Errorf("a third call of the owner to wait, its session's second: %v, want the owner's FullError{2, 2}", err)
	}
	done, err := s.Enter(ctx, "p", "k4", false, 4, 2)
	if err != nil {
		t.Errorf("another owner's call: %v", err)
	} else {
		done()
	}
	cancel()
	for range 2 {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("a waiter whose context ended: %v", err)
		}
	}
	if n := s.WaitingOf("o"); n != 0 {
		t.Errorf("%d calls of the owner wait after its waiters left, want 0", n)
	}
	for _, d := range dones {
		d()
	}
	if n := s.Sessions(); n != 0 {
		t.Errorf("%d sessions left after every call ended, want 0", n)
	}
}
