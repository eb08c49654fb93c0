package supervise

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLimit only keeps a broken test from hanging; nothing is timed.
const waitLimit = 30 * time.Second

// cfg is a configuration: a name and a version that stands for the rest.
type cfg struct {
	name    string
	version int
}

func (c cfg) Validate() error {
	if c.name == "" {
		return errors.New("no name")
	}
	return nil
}

// attempt is one Connect, waiting for the test to say how it ends.
type attempt struct {
	cfg   cfg
	ctx   context.Context
	reply chan outcome
}

type outcome struct {
	connected bool
	err       error
	took      time.Duration // how far the fake clock moves during the connection
}

type retry struct {
	cfg   cfg
	err   error
	delay time.Duration
}

// harness is a set of fake runners the test drives through channels.
type harness struct {
	t        *testing.T
	set      *Set[cfg]
	attempts chan *attempt
	retries  chan retry
	// holdOnStop makes Connect ignore its context and wait for a reply, as
	// a connection that takes time to close does.
	holdOnStop bool

	mu      sync.Mutex
	release chan struct{}  // closed when the test ends, so no Connect is held forever
	starts  map[cfg]int    // Hooks.Start calls
	active  map[string]int // Connect calls running, by name
	elapsed time.Duration  // the fake clock
}

func newHarness(t *testing.T, holdOnStop bool) *harness {
	h := &harness{
		t: t, attempts: make(chan *attempt), retries: make(chan retry, 100), holdOnStop: holdOnStop,
		release: make(chan struct{}),
		starts:  map[cfg]int{}, active: map[string]int{},
	}
	h.set = New(Hooks[cfg]{
		Name:     func(c cfg) string { return c.name },
		Equal:    func(a, b cfg) bool { return a == b },
		Validate: func(cfgs []cfg) error { return ValidateAll(cfgs, "thing", func(c cfg) string { return c.name }) },
		Start: func(c cfg) Runner {
			h.mu.Lock()
			h.starts[c]++
			h.mu.Unlock()
			return &runner{h: h, cfg: c}
		},
	})
	h.set.MinBackoff, h.set.MaxBackoff = time.Millisecond, 8*time.Millisecond
	base := time.Now()
	h.set.now = func() time.Time {
		h.mu.Lock()
		defer h.mu.Unlock()
		return base.Add(h.elapsed)
	}
	t.Cleanup(h.set.Close)
	t.Cleanup(func() { close(h.release) }) // runs first
	return h
}

type runner struct {
	h   *harness
	cfg cfg
}

func (r *runner) Connect(ctx context.Context) (bool, error) {
	if ctx.Err() != nil {
		// A loop stopped just as it was let go may still try: a real
		// connection fails at once with a done context.
		return false, ctx.Err()
	}
	h := r.h
	h.mu.Lock()
	h.active[r.cfg.name]++
	if n := h.active[r.cfg.name]; n > 1 {
		h.t.Errorf("%v connects while %d other loops of its name still run", r.cfg, n-1)
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.active[r.cfg.name]--
		h.mu.Unlock()
	}()
	stopped := ctx.Done()
	if h.holdOnStop {
		stopped = nil
	}
	a := &attempt{cfg: r.cfg, ctx: ctx, reply: make(chan outcome)}
	select {
	case h.attempts <- a:
	case <-stopped:
		return false, ctx.Err()
	case <-h.release:
		return false, errors.New("released")
	}
	select {
	case <-h.release:
		return false, errors.New("released")
	case o := <-a.reply:
		h.mu.Lock()
		h.elapsed += o.took
		h.mu.Unlock()
		return o.connected, o.err
	case <-stopped:
		return false, ctx.Err()
	}
}

func (r *runner) Retrying(err error, delay time.Duration) {
	select {
	case r.h.retries <- retry{cfg: r.cfg, err: err, delay: delay}:
	default:
		r.h.t.Errorf("%v retries more often than the test expects", r.cfg)
	}
}

func (h *harness) sync(cfgs ...cfg) {
	h.t.Helper()
	if err := h.set.Sync(context.Background(), cfgs); err != nil {
		h.t.Fatal(err)
	}
}

// receive returns the next value from ch; what says what is awaited if it
// never comes.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("waiting for %s", what)
		panic("unreachable")
	}
}

// next returns the next Connect.
func (h *harness) next() *attempt {
	h.t.Helper()
	return receive(h.t, h.attempts, "a connection attempt")
}

// nextRetry returns the next Retrying call.
func (h *harness) nextRetry() retry {
	h.t.Helper()
	return receive(h.t, h.retries, "a retry")
}

func (h *harness) startsOf(c cfg) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts[c]
}

func stopped(t *testing.T, a *attempt) {
	t.Helper()
	select {
	case <-a.ctx.Done():
	case <-time.After(waitLimit):
		t.Fatalf("%v was not stopped", a.cfg)
	}
}

func running(t *testing.T, a *attempt) {
	t.Helper()
	if a.ctx.Err() != nil {
		t.Fatalf("%v was stopped", a.cfg)
	}
}

func TestSyncStartsAndStops(t *testing.T) {
	h := newHarness(t, false)
	a, b := cfg{"a", 1}, cfg{"b", 1}
	h.sync(a, b)
	got := map[cfg]*attempt{}
	for range 2 {
		at := h.next()
		got[at.cfg] = at
	}
	if got[a] == nil || got[b] == nil {
		t.Fatalf("connected %v, want a and b", got)
	}
	if h.set.Len() != 2 {
		t.Errorf("Len %d, want 2", h.set.Len())
	}

	h.sync(b)
	stopped(t, got[a])
	running(t, got[b])
	if h.set.Len() != 1 {
		t.Errorf("Len %d, want 1", h.set.Len())
	}

	h.sync(b) // unchanged: nothing restarts
	running(t, got[b])
	if n := h.startsOf(b); n != 1 {
		t.Errorf("b started %d times, want once", n)
	}
	h.sync()
	stopped(t, got[b])
	if h.set.Len() != 0 {
		t.Errorf("Len %d, want 0", h.set.Len())
	}
}

func TestChangedConfigRestarts(t *testing.T) {
	h := newHarness(t, false)
	h.sync(cfg{"a", 1})
	old := h.next()
	h.sync(cfg{"a", 2})
	stopped(t, old)
	if now := h.next(); now.cfg != (cfg{"a", 2}) {
		t.Errorf("restarted with %v, want version 2", now.cfg)
	}
}

// TestReplacementWaitsForOld: a loop replacing one of the same name connects
// only once the old one has returned (the harness fails the test if two
// connect at once).
func TestReplacementWaitsForOld(t *testing.T) {
	h := newHarness(t, true)
	h.sync(cfg{"a", 1})
	old := h.next()
	h.sync(cfg{"a", 2})
	stopped(t, old)
	// The old connection is still closing: a later Sync must neither start
	// the replacement again nor let it connect.
	h.sync(cfg{"a", 2}, cfg{"b", 1})
	if b := h.next(); b.cfg.name != "b" {
		t.Fatalf("%v connected while version 1 was closing", b.cfg)
	} else {
		defer func() { b.reply <- outcome{err: errors.New("stopped")} }()
	}
	if n := h.startsOf(cfg{"a", 2}); n != 1 {
		t.Errorf("version 2 started %d times, want once", n)
	}
	old.reply <- outcome{err: errors.New("closed")}
	now := h.next()
	if now.cfg != (cfg{"a", 2}) {
		t.Fatalf("connected %v, want version 2", now.cfg)
	}
	h.sync()
	stopped(t, now)
	now.reply <- outcome{err: errors.New("closed")}
}

// TestStoppedWhileWaiting: a replacement stopped before the old loop has
// returned never connects.
func TestStoppedWhileWaiting(t *testing.T) {
	h := newHarness(t, true)
	h.sync(cfg{"a", 1})
	old := h.next()
	h.sync(cfg{"a", 2})
	h.sync()
	stopped(t, old)
	old.reply <- outcome{err: errors.New("closed")}
	h.set.Close()
	select {
	case a := <-h.attempts:
		t.Errorf("%v connected after it was stopped", a.cfg)
	default:
	}
}

func TestBackoff(t *testing.T) {
	h := newHarness(t, false)
	c := cfg{"a", 1}
	h.sync(c)
	fail := errors.New("refused")
	for i, step := range []struct {
		outcome
		want time.Duration
	}{
		{outcome{err: fail}, 1 * time.Millisecond},
		{outcome{err: fail}, 2 * time.Millisecond},
		{outcome{err: fail}, 4 * time.Millisecond},
		{outcome{err: fail}, 8 * time.Millisecond},
		{outcome{err: fail}, 8 * time.Millisecond},
		// Connected for longer than MaxBackoff: no crash loop, start again.
		{outcome{connected: true, err: fail, took: 9 * time.Millisecond}, 1 * time.Millisecond},
		{outcome{err: fail}, 2 * time.Millisecond},
		// Connected, but no longer than MaxBackoff: keep backing off.
		{outcome{connected: true, err: fail, took: 8 * time.Millisecond}, 4 * time.Millisecond},
		// A long failed attempt is no connection.
		{outcome{err: fail, took: time.Hour}, 8 * time.Millisecond},
		{outcome{connected: true, took: time.Hour}, 1 * time.Millisecond},
	} {
		h.next().reply <- step.outcome
		r := h.nextRetry()
		if r.delay != step.want || r.err != step.err {
			t.Errorf("step %d: retrying after %v with error %v, want %v and %v", i, r.delay, r.err, step.want, step.err)
		}
	}
}

// TestStopWhileBackingOff: a loop waiting to reconnect stops at once.
func TestStopWhileBackingOff(t *testing.T) {
	h := newHarness(t, false)
	h.set.MinBackoff, h.set.MaxBackoff = time.Hour, time.Hour
	h.sync(cfg{"a", 1})
	h.next().reply <- outcome{err: errors.New("refused")}
	if r := h.nextRetry(); r.delay != time.Hour {
		t.Fatalf("retrying after %v, want 1h", r.delay)
	}
	h.set.Close() // returns only once the loop has; goleak checks the timer's goroutine is gone too
	if h.set.Len() != 0 {
		t.Errorf("Len %d after Close", h.set.Len())
	}
}

// TestCloseWaits: Close returns only once every connection has closed, and
// a Sync after it starts nothing.
func TestCloseWaits(t *testing.T) {
	h := newHarness(t, true)
	h.sync(cfg{"a", 1}, cfg{"b", 1})
	attempts := []*attempt{h.next(), h.next()}
	closed := make(chan struct{})
	go func() {
		h.set.Close()
		close(closed)
	}()
	for _, a := range attempts {
		stopped(t, a)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while connections were closing")
	default:
	}
	for _, a := range attempts {
		a.reply <- outcome{err: errors.New("closed")}
	}
	select {
	case <-closed:
	case <-time.After(waitLimit):
		t.Fatal("Close hangs")
	}
	h.mu.Lock()
	for name, n := range h.active {
		if n != 0 {
			t.Errorf("%s still connected after Close", name)
		}
	}
	h.mu.Unlock()
	h.sync(cfg{"c", 1})
	if h.set.Len() != 0 || h.startsOf(cfg{"c", 1}) != 0 {
		t.Error("Sync after Close started a loop")
	}
}

func TestSyncRefuses(t *testing.T) {
	h := newHarness(t, false)
	err := h.set.Sync(context.Background(), []cfg{{"a", 1}, {"", 1}, {"a", 2}})
	if err == nil || !strings.Contains(err.Error(), "no name") || !strings.Contains(err.Error(), `thing "a": name used twice`) {
		t.Errorf("Sync of an invalid list: %v, want both errors", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.set.Sync(ctx, []cfg{{"a", 1}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Sync with a done context: %v", err)
	}
	if h.set.Len() != 0 {
		t.Errorf("a refused Sync started %d loops", h.set.Len())
	}
}

func ExampleValidateAll() {
	cfgs := []cfg{{"a", 1}, {"b", 1}, {"a", 2}, {"", 3}}
	fmt.Println(ValidateAll(cfgs, "server", func(c cfg) string { return c.name }))
	// Output:
	// server "a": name used twice
	// no name
}
