package runners

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// TestRunnersReuseIdleGoroutines: a function given once a runner is idle
// runs on it. Each function is given once the runner waits for work: a
// runner is idle only once it is back in its select after the function
// returned, which on a loaded machine can take longer than any sleep.
func TestRunnersReuseIdleGoroutines(t *testing.T) {
	t.Parallel()
	r := New(time.Minute)
	defer r.Close()
	for range 20 {
		done := make(chan struct{})
		r.Go(func() { close(done) })
		<-done
		waitFor(t, func() bool { return idleRunners(r) > 0 })
	}
	if n := r.Live(); n != 1 {
		t.Errorf("%d runners for 20 functions run one after another, want 1", n)
	}
}

// idleRunners counts p's runners waiting for work, from the goroutines'
// stacks (the loop's first argument is p).
func idleRunners(p *Pool) int {
	loop := fmt.Sprintf("github.com/toolwire/toolwire/engine/internal/runners.(*Pool).loop(%p", p)
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, frames, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[select") && strings.HasPrefix(frames, loop) {
			n++
		}
	}
	return n
}

func TestRunnersExitWhenIdleOrClosed(t *testing.T) {
	t.Parallel()
	r := New(20 * time.Millisecond)
	r.Go(func() {})
	waitFor(t, func() bool { return r.Live() == 0 })

	// Close does not wait for a runner stuck in its function; the runner
	// exits when the function returns.
	r = New(time.Minute)
	release := make(chan struct{})
	r.Go(func() { <-release })
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a busy runner")
	}
	if n := r.Live(); n != 1 {
		t.Errorf("%d runners after Close with one busy, want 1", n)
	}
	close(release)
	waitFor(t, func() bool { return r.Live() == 0 })
}

// waitFor polls cond until it holds, failing the test just before its own
// deadline: what it waits for must happen, and a fixed bound (it was 10s)
// is one a loaded machine can outlast.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := testenv.Deadline(t)
	for ; !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met by the test's deadline")
		}
	}
}
