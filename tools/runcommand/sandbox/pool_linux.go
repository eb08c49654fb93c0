package sandbox

import "sync"

// pool keeps spare supervisors: started, prepared (parent-death signal,
// subreaper, threads), and waiting for a command. A spare holds no
// restriction yet and has no child; it exits when its connection closes
// (Close, or the server's death) and on the parent-death signal.
type pool struct {
	spawn func() (*supervisorProc, error)

	mu       sync.Mutex
	idle     []*supervisorProc
	starting int
	closed   bool
	adding   sync.WaitGroup // the spares being started
}

func newPool(s *Sandbox) *pool { return &pool{spawn: s.spawn} }

// take returns the oldest spare, the likeliest to be ready, or nil when
// none is waiting.
func (p *pool) take() *supervisorProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == 0 {
		return nil
	}
	sup := p.idle[0]
	p.idle = p.idle[1:]
	return sup
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
	p.mu.Unlock()
	if err == nil && !keep {
		sup.discard()
	}
}

// close ends the spares, those still starting too; later commands start
// a supervisor each.
func (p *pool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, sup := range idle {
		sup.discard()
	}
	p.adding.Wait()
}
