package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// seqLog records the order in which sequenced calls start and end.
type seqLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *seqLog) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *seqLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, " ")
}

// enterAll calls Sequence for each tool in order, each from its own
// goroutine but only once the previous one has entered its queue or
// started, so arrival order is the order given. Each call holds its turn
// until release[i] is closed.
func enterAll(t *testing.T, e *Engine, ctx context.Context, session string, names ...string) (started []chan struct{}, release []chan struct{}, wait func()) {
	t.Helper()
	snap := engineTools(t, func(string) {})
	var wg sync.WaitGroup
	started, release = make([]chan struct{}, len(names)), make([]chan struct{}, len(names))
	for i := range names {
		started[i], release[i] = make(chan struct{}), make(chan struct{})
	}
	for i, name := range names {
		before := e.seqWaiting(ctx, session)
		wg.Go(func() {
			done, err := e.Sequence(ctx, snap, session, name)
			if err != nil {
				t.Errorf("call %d (%s): %v", i, name, err)
				return
			}
			close(started[i])
			<-release[i]
			done()
		})
		// Arrived: it started, or it waits behind the others.
		waitFor(t, func() bool {
			select {
			case <-started[i]:
				return true
			default:
				return e.seqWaiting(ctx, session) > before
			}
		})
	}
	return started, release, wg.Wait
}

// seqWaiting returns how many calls of the session wait for their turn.
func (e *Engine) seqWaiting(ctx context.Context, session string) int {
	return e.seq.WaitingIn(fmt.Sprintf("%q/%s", CallerFrom(ctx), session))
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func states(started []chan struct{}) string {
	var b strings.Builder
	for _, c := range started {
		if isClosed(c) {
			b.WriteByte('R')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// TestSequenceOrdersLikeLanes: [echo, echo, write, echo, echo] arriving one
// by one on one session run as lanes [P(2), S(1), P(2)] would: both reads,
// then the write alone once they end, then the reads behind it.
func TestSequenceOrdersLikeLanes(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	ctx := WithCaller(context.Background(), "alice")
	started, release, wait := enterAll(t, e, ctx, "s", "echo", "echo", "write", "echo", "echo")
	if got := states(started); got != "RR..." {
		t.Fatalf("after arrival: %s, want RR... (reads at once; the write and the reads after it wait)", got)
	}
	close(release[0])
	time.Sleep(20 * time.Millisecond)
	if got := states(started); got != "RR..." {
		t.Fatalf("one read ended: %s, want RR... (the write waits for every earlier call)", got)
	}
	close(release[1])
	waitFor(t, func() bool { return isClosed(started[2]) })
	time.Sleep(20 * time.Millisecond)
	if got := states(started); got != "RRR.." {
		t.Fatalf("reads ended: %s, want RRR.. (the write alone)", got)
	}
	close(release[2])
	waitFor(t, func() bool { return isClosed(started[3]) && isClosed(started[4]) })
	close(release[3])
	close(release[4])
	wait()
	if n := e.seq.Sessions(); n != 0 {
		t.Errorf("%d queues left after every call ended; want none", n)
	}
}

// TestSequenceReadsQueueBehindAWaitingWrite: a read that arrives while a
// write waits does not overtake it, though only reads run.
func TestSequenceReadsQueueBehindAWaitingWrite(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	ctx := context.Background()
	started, release, wait := enterAll(t, e, ctx, "s", "echo", "write", "echo")
	time.Sleep(20 * time.Millisecond)
	if got := states(started); got != "R.." {
		t.Fatalf("%s, want R.. (arrival order kept)", got)
	}
	close(release[0])
	waitFor(t, func() bool { return isClosed(started[1]) })
	if isClosed(started[2]) {
		t.Fatal("the read after the write started while the write ran")
	}
	close(release[1])
	waitFor(t, func() bool { return isClosed(started[2]) })
	close(release[2])
	wait()
}

// TestSequenceUnknownAndRefusedToolsAreUnsafe: a call of a tool that does
// not exist, or that the caller may not call, is ordered as an unsafe one,
// as lanes plan it. (hold, declared safe here, runs first.)
func TestSequenceUnknownAndRefusedToolsAreUnsafe(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"nope", "echo"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Safe: map[string]bool{"hold": true}}
			var deps Deps
			if name == "echo" {
				deps.Admission = admit{permitted: func(caller, tool string) bool { return tool != "echo" }}
			}
			e := newTestEngineWith(t, cfg, deps)
			started, release, wait := enterAll(t, e, context.Background(), "s", "hold", name)
			time.Sleep(20 * time.Millisecond)
			if got := states(started); got != "R." {
				t.Fatalf("%s, want R. (%s waits as an unsafe call)", got, name)
			}
			close(release[0])
			waitFor(t, func() bool { return isClosed(started[1]) })
			close(release[1])
			wait()
		})
	}
}

// TestSequenceScopes: calls of other sessions, of the same session ID under
// another caller, and calls with no session are not held back.
func TestSequenceScopes(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	snap := engineTools(t, func(string) {})
	alice := WithCaller(context.Background(), "alice")
	done, err := e.Sequence(alice, snap, "s", "write")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for _, c := range []struct {
		ctx     context.Context
		session string
	}{
		{alice, "other"},
		{WithCaller(context.Background(), "bob"), "s"},
		{context.Background(), "s"},
		{alice, ""},
	} {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		d, err := e.Sequence(ctx, snap, c.session, "write")
		cancel()
		if err != nil {
			t.Errorf("caller %q, session %q: %v; want to start at once", CallerFrom(c.ctx), c.session, err)
			continue
		}
		d()
	}
}

// TestSequenceCancelledWaiterLeaves: a waiting call whose context ends
// leaves the queue with Canceled, and the calls behind it move up: here
// the reads an unsafe call held back start at once.
func TestSequenceCancelledWaiterLeaves(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	snap := engineTools(t, func(string) {})
	ctx := context.Background()
	first, err := e.Sequence(ctx, snap, "s", "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer first()
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := e.Sequence(wctx, snap, "s", "write")
		errc <- err
	}()
	waitFor(t, func() bool { return e.seqWaiting(ctx, "s") == 1 })
	readc := make(chan func(), 1)
	go func() {
		d, err := e.Sequence(ctx, snap, "s", "echo")
		if err != nil {
			t.Error(err)
			d = func() {}
		}
		readc <- d
	}()
	waitFor(t, func() bool { return e.seqWaiting(ctx, "s") == 2 })
	cancel()
	if err := <-errc; CodeOf(err) != Canceled {
		t.Errorf("cancelled waiter: %v, want Canceled", err)
	}
	select {
	case d := <-readc:
		d()
	case <-testDeadline(t):
		t.Fatal("the read behind the cancelled write did not start")
	}
}

// TestSequenceBounds: at most MaxParallel safe calls of a session run at
// once, and at most MaxCallsPerBatch wait.
func TestSequenceBounds(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxParallel: 2, MaxCallsPerBatch: 1})
	started, release, wait := enterAll(t, e, context.Background(), "s", "echo", "echo", "echo")
	if got := states(started); got != "RR." {
		t.Fatalf("%s, want RR. (MaxParallel 2)", got)
	}
	_, err := e.Sequence(context.Background(), engineTools(t, func(string) {}), "s", "echo")
	if CodeOf(err) != ResourceExhausted {
		t.Errorf("a second waiter with MaxCallsPerBatch 1: %v, want ResourceExhausted", err)
	}
	close(release[0])
	waitFor(t, func() bool { return isClosed(started[2]) })
	close(release[1])
	close(release[2])
	wait()
	if _, err := e.Sequence(context.Background(), engineTools(t, func(string) {}), strings.Repeat("s", MaxIDBytes+1), "echo"); CodeOf(err) != InvalidArgument {
		t.Errorf("an overlong session ID: %v, want InvalidArgument", err)
	}
}
