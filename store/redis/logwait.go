package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A reader of a log waits for its next entry with XREAD BLOCK, which holds
// one of the client's pooled connections for as long as it blocks (up to
// maxBlock). One each, a thousand readers of one batch on a replica kept
// all 20 connections of its pool blocked, the replica's writes (a batch's
// events, a lease's renewal, an idempotency claim) queued behind them, and
// readers beyond the pool failed their waits ("connection pool timeout").
// So the readers of this process share their blocking reads: those
// waiting for the same log after the same index wait on one XREAD, and at
// most half the pool's connections block at once, the other half left to
// everything else. A wait that finds no connection of that half free
// within maxBlock ends as a block that timed out does: its reader looks
// at the log again. What the readers then read is shared too
// (coalesce.go).

// logWaits are a Store's blocking reads in flight.
type logWaits struct {
	mu    sync.Mutex
	reads map[waitKey]*sharedRead
	slots chan struct{} // one per blocking read in flight; nil until first used
}

type waitKey struct {
	name  string
	index uint64
}

// sharedRead is one XREAD BLOCK that its waiters share.
type sharedRead struct {
	done    chan struct{} // closed once the read is over; err is then set
	err     error
	waiters int // under logWaits.mu
	cancel  context.CancelFunc
}

// maxBlockingShare is the share of the client's pool blocking reads may
// hold at once, as a divisor.
const maxBlockingShare = 2

// blockingSlots is how many blocking reads may be in flight at once.
func (s *Store) blockingSlots() int {
	pool := 0
	switch c := s.c.(type) {
	case *goredis.Client:
		pool = c.Options().PoolSize
	case *goredis.ClusterClient:
		pool = c.Options().PoolSize // each node's; reads spread over nodes
	}
	if pool <= 0 {
		pool = 10 // go-redis's least default
	}
	return max(1, pool/maxBlockingShare)
}

// waitShared waits until the log name has an entry after index, or for
// up to maxBlock, on the one blocking read of this store for that log
// and index, started by the first to wait.
func (s *Store) waitShared(ctx context.Context, name string, index uint64) error {
	w := &s.waits
	key := waitKey{name, index}
	w.mu.Lock()
	if w.slots == nil {
		w.slots = make(chan struct{}, s.blockingSlots())
	}
	r := w.reads[key]
	if r == nil {
		if w.reads == nil {
			w.reads = make(map[waitKey]*sharedRead)
		}
		// The read outlives any one waiter: it ends when it has an
		// answer, or when the last waiter has left.
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r = &sharedRead{done: make(chan struct{}), cancel: cancel}
		w.reads[key] = r
		go s.blockRead(rctx, key, r)
	}
	r.waiters++
	w.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		w.mu.Lock()
		r.waiters--
		if r.waiters == 0 && w.reads[key] == r {
			delete(w.reads, key)
			r.cancel()
		}
		w.mu.Unlock()
		return ctx.Err()
	}
}

// blockRead runs r, an XREAD BLOCK of the log after key.index, once a
// slot is free, and hands its outcome to r's waiters.
func (s *Store) blockRead(ctx context.Context, key waitKey, r *sharedRead) {
	w := &s.waits
	err := func() error {
		timer := time.NewTimer(maxBlock)
		defer timer.Stop()
		select {
		case w.slots <- struct{}{}:
			defer func() { <-w.slots }()
		case <-timer.C:
			return nil // as a block that timed out: look again
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := s.c.XRead(ctx, &goredis.XReadArgs{
			Streams: []string{s.logKeys(key.name)[0], strconv.FormatUint(key.index, 10) + "-0"},
			Count:   1,
			Block:   maxBlock,
		}).Result()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil, errors.Is(err, goredis.Nil):
			return nil
		}
		return fmt.Errorf("redis store: wait for log: %w", err)
	}()
	w.mu.Lock()
	if w.reads[key] == r {
		delete(w.reads, key)
	}
	r.err = err
	w.mu.Unlock()
	r.cancel()
	close(r.done)
}
