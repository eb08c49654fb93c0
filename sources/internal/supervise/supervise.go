// Package supervise keeps a set of named background connections running:
// one loop per configuration, started, stopped and restarted as the set is
// synced to a new list, each reconnecting with capped exponential backoff.
// The MCP gateway (sources/mcpsource) and the remote mounts (sources/remote) are
// built on it.
//
// It imports only the standard library; it knows nothing of tools or the
// registry.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Runner is the work of one configuration.
type Runner interface {
	// Connect makes one connection and serves it until it ends or ctx is
	// done, leaving nothing of it behind. connected reports whether it got
	// as far as serving: a connection that served longer than MaxBackoff
	// was no crash loop, so the next delay starts again at MinBackoff.
	Connect(ctx context.Context) (connected bool, err error)
	// Retrying is told why the connection failed or ended, and how long the
	// set waits before the next one; it logs.
	Retrying(err error, delay time.Duration)
}

// Hooks tell a Set about its configuration type C.
type Hooks[C any] struct {
	// Name is c's name, unique in a list.
	Name func(c C) string
	// Equal reports whether a and b, of the same name, are the same; a
	// changed configuration is restarted.
	Equal func(a, b C) bool
	// Validate checks a whole list before Sync changes anything; it must
	// reject duplicate names (see ValidateAll).
	Validate func(cfgs []C) error
	// Start returns the Runner for c. It is called with the set's lock
	// held, so it must not call the set.
	Start func(c C) Runner
}

// Set runs a Runner for each configuration it is synced to.
type Set[C any] struct {
	// MinBackoff and MaxBackoff bound the wait before reconnecting: it
	// starts at MinBackoff and doubles after each failure, up to
	// MaxBackoff. New sets 500ms and 30s; change them before the first Sync.
	MinBackoff, MaxBackoff time.Duration

	hooks Hooks[C]
	now   func() time.Time // tests fake the clock that measures connections

	mu      sync.Mutex
	closed  bool
	running map[string]*loop[C]
	dying   map[string]<-chan struct{} // stopped loops, done when they have returned
	wg      sync.WaitGroup             // one per loop
}

// loop is one configuration's goroutine.
type loop[C any] struct {
	name   string
	cfg    C
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned
	state  state
}

// New returns an empty set; it runs nothing until Sync.
func New[C any](h Hooks[C]) *Set[C] {
	return &Set[C]{
		MinBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second,
		hooks: h, now: time.Now,
		running: map[string]*loop[C]{}, dying: map[string]<-chan struct{}{},
	}
}

// Sync makes the set run exactly cfgs: it starts loops for new names, stops
// those no longer listed and restarts those whose configuration changed. It
// returns at once; connections are made in the background, and live until
// Close or a later Sync: ctx only bounds the call itself. An invalid list
// is an error and changes nothing; after Close, Sync does nothing.
func (s *Set[C]) Sync(ctx context.Context, cfgs []C) error {
	if err := s.hooks.Validate(cfgs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	want := make(map[string]C, len(cfgs))
	for _, c := range cfgs {
		want[s.hooks.Name(c)] = c
	}
	for name, l := range s.running {
		if c, ok := want[name]; !ok || !s.hooks.Equal(c, l.cfg) {
			l.cancel()
			s.dying[name] = l.done
			delete(s.running, name)
		}
	}
	for name, c := range want {
		if _, ok := s.running[name]; !ok {
			// A loop replacing one of the same name waits until the old one
			// has returned (and so, for the gateway and the mounts, removed
			// its tools), so what it registers under the name is free again.
			s.start(name, c, s.dying[name])
		}
	}
	for name, done := range s.dying {
		select {
		case <-done:
			delete(s.dying, name)
		default:
		}
	}
	return nil
}

// Close stops every loop and waits until all have returned.
func (s *Set[C]) Close() {
	s.mu.Lock()
	s.closed = true
	for name, l := range s.running {
		l.cancel()
		delete(s.running, name)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Len is the number of configurations the set runs.
func (s *Set[C]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

// start runs a loop for c in the background, once after is closed (nil
// means at once). s.mu is held.
func (s *Set[C]) start(name string, c C, after <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop[C]{name: name, cfg: c, cancel: cancel, done: make(chan struct{})}
	l.state.set(StateDown, nil, s.now())
	s.running[name] = l
	r := s.hooks.Start(c)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(l.done)
		if after != nil {
			select {
			case <-after:
			case <-ctx.Done():
				return
			}
		}
		s.run(ctx, l, r)
	}()
}

// run connects until ctx is done, backing off exponentially after failures.
func (s *Set[C]) run(ctx context.Context, l *loop[C], r Runner) {
	delay := s.MinBackoff
	up := func() { l.state.set(StateUp, nil, s.now()) }
	for {
		start := s.now()
		connected, err := r.Connect(context.WithValue(ctx, upKey{}, up))
		if ctx.Err() != nil {
			return
		}
		why := err
		if why == nil {
			why = errors.New("the connection ended")
		}
		l.state.set(StateRetrying, why, s.now())
		if connected && s.now().Sub(start) > s.MaxBackoff {
			delay = s.MinBackoff // it ran a good while: this is no crash loop
		}
		r.Retrying(err, delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, s.MaxBackoff)
	}
}

// ValidateAll validates every configuration and checks that names are
// unique; what names a configuration in the error for a duplicate, as in
// `remote "a": name used twice`.
func ValidateAll[C interface{ Validate() error }](cfgs []C, what string, name func(C) string) error {
	seen := map[string]bool{}
	var errs []error
	for _, c := range cfgs {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[name(c)] {
			errs = append(errs, fmt.Errorf("%s %q: name used twice", what, name(c)))
		}
		seen[name(c)] = true
	}
	return errors.Join(errs...)
}
