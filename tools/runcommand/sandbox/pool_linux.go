package sandbox

import (
	"sync"
	"time"
)

// spareWait is how long a command waits for a spare that is starting
// before it starts a supervisor of its own.
const spareWait = 2 * time.Second

// pool keeps supervisors ready for a command. Spares are started,
// prepared (parent-death signal, subreaper, threads) and waiting for their
// first command; they hold no restriction yet and have no child. Warm
// supervisors have run a command and, nothing of it left, wait for another
// of the same uid (the session's, which they took, or the server's): a
// command that finds one starts no process but its own. Either kind exits
// when its connection closes (Close, or the server's death) and on the
// parent-death signal.
type pool struct {
	spawn func() (*supervisorProc, error)

	mu       sync.Mutex
	idle     []*supervisorProc // spares, oldest first
	warm     []*supervisorProc // used ones, least recently used first
	starting int
	changed  chan struct{} // closed when a spare is added or a start fails
	closed   bool
	adding   sync.WaitGroup // the spares being started
}

func newPool(s *Sandbox) *pool { return &pool{spawn: s.spawn, changed: make(chan struct{})} }

// take returns a supervisor for a command of uid (-1: the server's): the
// warm one of that uid used last, else the oldest spare, else, when a
// spare is starting, that one once ready (a start of its own would take as
// long, and cost one more); nil when there is none.
func (p *pool) take(uid int) *supervisorProc {
	deadline := time.Now().Add(spareWait)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.warm) - 1; i >= 0; i-- {
		if sup := p.warm[i]; sup.uid == uid {
			p.warm = append(p.warm[:i], p.warm[i+1:]...)
			return sup
		}
	}
	for len(p.idle) == 0 && p.starting > 0 && !p.closed {
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-time.After(wait):
		}
		p.mu.Lock()
	}
	if len(p.idle) == 0 {
		return nil
	}
	sup := p.idle[0]
	p.idle = p.idle[1:]
	return sup
}

// put keeps a supervisor that ran a command and waits for another.
func (p *pool) put(sup *supervisorProc) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		sup.discard()
		return
	}
	p.warm = append(p.warm, sup)
	var evicted *supervisorProc
	if len(p.warm) > Warm {
		evicted = p.warm[0]
		p.warm = p.warm[1:]
	}
	p.mu.Unlock()
	if evicted != nil {
		evicted.discard()
	}
}

// refill starts spares in the background until the pool has Spares.
func (p *pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && len(p.idle)+p.starting < Spares {
		p.starting++
		p.adding.Add(1)
		go p.add()
	}
}

// add starts one spare.
func (p *pool) add() {
	defer p.adding.Done()
	sup, err := p.spawn()
	p.mu.Lock()
	p.starting--
	keep := err == nil && !p.closed
	if keep {
		p.idle = append(p.idle, sup)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if err == nil && !keep {
		sup.discard()
	}
}

// close ends the spares, those still starting too, and the warm
// supervisors; later commands start a supervisor each.
func (p *pool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	idle := append(p.idle, p.warm...)
	p.idle, p.warm = nil, nil
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, sup := range idle {
		sup.discard()
	}
	p.adding.Wait()
}
