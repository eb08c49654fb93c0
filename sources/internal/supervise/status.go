package supervise

import (
	"context"
	"sort"
	"sync"
	"time"
)

// The states of a configuration's connection (Status.State).
const (
	StateDown     = "down"     // not serving yet: its first connection is being made
	StateUp       = "up"       // the Runner said it serves (Up)
	StateRetrying = "retrying" // not serving: the last connection failed or ended, and the set reconnects after a wait
)

// Status is where one configuration's connection stands.
type Status struct {
	Name  string
	State string    // StateDown, StateUp or StateRetrying
	Err   string    // why the last connection failed or ended; "" when none has
	Since time.Time // when State last changed
}

// state is a loop's Status, written by its goroutine and read by Status.
type state struct {
	mu    sync.Mutex
	state string
	err   string
	since time.Time
}

func (s *state) set(st string, err error, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err.Error()
	}
	if st != s.state {
		s.state, s.since = st, now
	}
}

type upKey struct{}

// Up tells the set that the connection Connect was called for serves now:
// a Runner calls it with Connect's context once it is connected (its tools
// offered), so Status reports it up until Connect returns. Called with
// another context it does nothing.
func Up(ctx context.Context) {
	if up, ok := ctx.Value(upKey{}).(func()); ok {
		up()
	}
}

// Status returns the status of each configuration the set runs, by name.
func (s *Set[C]) Status() []Status {
	s.mu.Lock()
	out := make([]Status, 0, len(s.running))
	for name, l := range s.running {
		l.state.mu.Lock()
		out = append(out, Status{Name: name, State: l.state.state, Err: l.state.err, Since: l.state.since})
		l.state.mu.Unlock()
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
