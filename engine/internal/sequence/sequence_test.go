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
	done, err := s.Enter(ctx, "k", false, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := s.Enter(waitCtx, "k", false, 4, 1)
		left <- err
	}()
	for s.WaitingIn("k") != 1 {
		runtime.Gosched() // the goroutine above has not queued yet
	}
	var full *FullError
	if _, err := s.Enter(ctx, "k", true, 4, 1); !errors.As(err, &full) || full.Waiting != 1 || full.Limit != 1 {
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
