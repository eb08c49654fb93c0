package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store"
)

// WithRestart gives the Signals suite a way to restart the store's server
// (stop it, so that its connections break, and start it again), for
// stores that have one: the suite then checks that a watcher is woken
// once the store watches again, since notices sent meanwhile are lost.
func WithRestart(restart func()) Option {
	return func(c *config) { c.restart = restart }
}

// watcher counts the wakes of one Watch and hands each over on a channel.
type watcher struct {
	n     atomic.Int64
	woken chan struct{}
	stop  func()
}

func watch(t *testing.T, s store.Signals, topic string) *watcher {
	t.Helper()
	w := &watcher{woken: make(chan struct{}, 1024)}
	stop, ok := s.Watch(topic, func() {
		w.n.Add(1)
		select {
		case w.woken <- struct{}{}:
		default:
		}
	})
	if !ok {
		t.Fatalf("Watch(%q) refused with no other watcher", topic)
	}
	w.stop = stop
	t.Cleanup(stop)
	return w
}

// next waits for the watcher's next wake; the test fails when it never
// comes (by the test binary's deadline, less a margin to report it).
func (w *watcher) next(t *testing.T, what string) {
	t.Helper()
	ctx, cancel := Bound(t)
	defer cancel()
	select {
	case <-w.woken:
	case <-ctx.Done():
		t.Fatalf("%s: the watcher was never woken", what)
	}
}

// Bound is a context for a wait that must end, not within any time: it
// ends a little before the test binary's deadline (go test -timeout), so
// that a wait that never ends fails the test with its own message rather
// than the binary's panic; two minutes without a deadline.
func Bound(t testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), dl.Add(-time.Until(dl)/10))
		}
	}
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

// drain forgets the wakes so far.
func (w *watcher) drain() {
	for {
		select {
		case <-w.woken:
		default:
			return
		}
	}
}

// Signals runs the notices' contract against stores made by open, which
// returns two handles of one store, as two replicas sharing it would hold
// them (the same value twice for a store one process holds: memory,
// bolt); open should register their Close with t.Cleanup.
//
// No subtest relies on time: each waits for the wake it expects, and
// counts what it must not see by the order notices arrive in.
func Signals[S store.Signals](t *testing.T, open func(t *testing.T) (S, S), opts ...Option) {
	c := newConfig(opts)
	ctx := context.Background()
	// settle returns once b's watchers are sure to get what a signals,
	// and nothing from before reaches them: a store that subscribes wakes
	// everyone once it has (and a notice sent before would be lost), so
	// wait for the first wake of a topic of its own. That wake may be the
	// wake-everyone itself, still handing out to ws after it; a second
	// topic, watched only now and signalled, is woken after it is over
	// (a store hands out its notices in order).
	settle := func(t *testing.T, a, b S, ws ...*watcher) {
		t.Helper()
		s := watch(t, b, "settle")
		must(t, a.Signal(ctx, "settle"))
		s.next(t, "settling")
		s2 := watch(t, b, "settled")
		must(t, a.Signal(ctx, "settled"))
		s2.next(t, "settled")
		for _, w := range ws {
			w.drain()
		}
	}
	t.Run("SignalWakesTheTopicsWatcherOnAnotherHandle", func(t *testing.T) {
		a, b := open(t)
		x, y := watch(t, b, "batch:x"), watch(t, b, "batch:y")
		settle(t, a, b, x, y)
		// Notices reach b: it says so, and its watchers poll slowly.
		if !b.Listening() {
			t.Error("Listening is false on a handle that hears notices")
		}
		nx, ny := x.n.Load(), y.n.Load()
		must(t, a.Signal(ctx, "batch:x"))
		x.next(t, "signal x")
		must(t, a.Signal(ctx, "batch:y"))
		y.next(t, "signal y")
		must(t, a.Signal(ctx, "nobody watches this"))
		must(t, b.Signal(ctx, "batch:x")) // the signaller's own handle too
		x.next(t, "signal x on the watcher's handle")
		// Notices arrive in order: by the last x, each was handed out.
		if got := x.n.Load() - nx; got != 2 {
			t.Errorf("x was woken %d times by two signals of x (and one of y), want 2", got)
		}
		if got := y.n.Load() - ny; got != 1 {
			t.Errorf("y was woken %d times by one signal of y (and two of x), want 1", got)
		}
	})
	t.Run("StoppedWatcherIsNotWoken", func(t *testing.T) {
		a, b := open(t)
		gone, kept := watch(t, b, "approval:b/c"), watch(t, b, "approval:b/c")
		settle(t, a, b, gone, kept)
		gone.stop()
		n := gone.n.Load()
		must(t, a.Signal(ctx, "approval:b/c"))
		kept.next(t, "signal to the watcher kept")
		if gone.n.Load() != n {
			t.Error("a stopped watcher was woken")
		}
		gone.stop() // stopping twice is harmless
	})
	if c.restart == nil {
		return
	}
	t.Run("WatcherWokenAfterTheServerRestarts", func(t *testing.T) {
		a, b := open(t)
		x := watch(t, b, "batch:x")
		settle(t, a, b, x)
		c.restart()
		// No signal: what was sent while the server was away is lost, so
		// the store wakes its watchers once it watches again.
		x.next(t, "the server's restart")
		x.drain()
		must(t, a.Signal(ctx, "batch:x"))
		x.next(t, "a signal after the restart")
	})
}
