// Package runners runs functions on goroutines that live on between uses,
// so the stacks they grow (argument validation and JSON coding go deep)
// are grown once rather than for every batch; copying growing stacks was
// the largest single cost of a small batch. Idle runners exit after a
// while. The engine runs its batches' lanes and parallel calls on them.
package runners

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a set of runners.
type Pool struct {
	work chan func()
	idle time.Duration
	stop chan struct{}
	once sync.Once
	live atomic.Int32 // runners, busy or idle
}

// New returns a pool whose runners exit once idle for idle.
func New(idle time.Duration) *Pool {
	return &Pool{work: make(chan func()), idle: idle, stop: make(chan struct{})}
}

// Go runs f on an idle runner, or on a new one when none is idle.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.live.Add(1)
		go p.loop(f)
	}
}

func (p *Pool) loop(f func()) {
	defer p.live.Add(-1)
	// The idle timer is made when the runner first goes idle, not before:
	// a runner busy with a call that waits (most of the calls in flight
	// on a busy server) holds no timer.
	var idle *time.Timer
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	for {
		f()
		if idle == nil {
			idle = time.NewTimer(p.idle)
		} else {
			idle.Reset(p.idle)
		}
		select {
		case f = <-p.work:
		case <-idle.C:
			return
		case <-p.stop:
			return
		}
	}
}

// Live is the number of runners, busy or idle.
func (p *Pool) Live() int { return int(p.live.Load()) }

// Close makes idle runners exit, and busy ones when their function returns.
// It does not wait: a runner may be stuck in a tool that was abandoned.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.stop) })
}
