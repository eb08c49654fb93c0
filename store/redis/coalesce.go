package redis

import (
	"context"
	"errors"
	"sync"
)

// The readers of a detached batch on one replica all read the same log at
// the same moments: when an entry is appended, each looks at the log's
// state (Stat) and reads what follows (XRANGE), a round trip each. A
// thousand readers of one batch made a thousand of each per event, and
// the replica's own writes queued behind them for its pooled connections:
// a detached batch of one echo on that replica took 0.13–0.70 s against
// 0.03–0.08 s on another. So identical reads of this process share one
// round trip. A read joins the next one of its key to start, never one
// already under way, so that what it gets was read after it asked (a
// reader that has just been told of an entry does not get a state read
// before it): N readers at once cost at most two round trips.

// coalescer shares the identical reads of this process, by key.
type coalescer[T any] struct {
	mu      sync.Mutex
	running map[string]*flight[T] // the read under way for each key
}

// flight is one read, and the calls that wait for it.
type flight[T any] struct {
	done chan struct{} // closed once v and err are set
	v    T
	err  error
	next *flight[T] // the read that starts once this one ends; under mu
}

// do returns read's answer for key, from a read started after do was
// called: its own, or one it shares with the calls that came meanwhile.
// A shared read that failed for its caller's context is made again with
// this one's.
func (c *coalescer[T]) do(ctx context.Context, key string, read func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	if c.running == nil {
		c.running = make(map[string]*flight[T])
	}
	cur := c.running[key]
	if cur == nil {
		f := &flight[T]{done: make(chan struct{})}
		c.running[key] = f
		c.mu.Unlock()
		return c.run(ctx, key, f, read)
	}
	// A read is under way: wait for the next, which the first to wait
	// for it starts once the current one ends.
	f, lead := cur.next, false
	if f == nil {
		f, lead = &flight[T]{done: make(chan struct{})}, true
		cur.next = f
	}
	c.mu.Unlock()
	if lead {
		select {
		case <-cur.done:
		case <-ctx.Done():
			// Those waiting for f need it made: make it anyway, its
			// answer being this context's error.
			<-cur.done
		}
		c.mu.Lock()
		c.running[key] = f
		c.mu.Unlock()
		return c.run(ctx, key, f, read)
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
	if f.err != nil && ctx.Err() == nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
		return read(ctx) // the leader's context ended, not ours
	}
	return f.v, f.err
}

// run makes f's read and hands its answer to those waiting.
func (c *coalescer[T]) run(ctx context.Context, key string, f *flight[T], read func(context.Context) (T, error)) (T, error) {
	f.v, f.err = read(ctx)
	c.mu.Lock()
	if c.running[key] == f && f.next == nil {
		delete(c.running, key)
	}
	c.mu.Unlock()
	close(f.done)
	return f.v, f.err
}
