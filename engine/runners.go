package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// runners runs functions on goroutines that live on between uses, so the
// stacks they grow (argument validation and JSON coding go deep) are grown
// once rather than for every batch; copying growing stacks was the largest
// single cost of a small batch. Idle runners exit after a while.
type runners struct {
	work chan func()
	idle time.Duration
	stop chan struct{}
	once sync.Once
	live atomic.Int32 // runners, busy or idle
}

func newRunners(idle time.Duration) *runners {
	return &runners{work: make(chan func()), idle: idle, stop: make(chan struct{})}
}

// Go runs f on an idle runner, or on a new one when none is idle.
func (r *runners) Go(f func()) {
	select {
	case r.work <- f:
	default:
		r.live.Add(1)
		go r.loop(f)
	}
}

func (r *runners) loop(f func()) {
	defer r.live.Add(-1)
	idle := time.NewTimer(r.idle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(r.idle)
		select {
		case f = <-r.work:
		case <-idle.C:
			return
		case <-r.stop:
			return
		}
	}
}

// Close makes idle runners exit, and busy ones when their function returns.
// It does not wait: a runner may be stuck in a tool that was abandoned.
func (r *runners) Close() {
	r.once.Do(func() { close(r.stop) })
}
