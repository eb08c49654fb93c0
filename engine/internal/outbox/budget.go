package outbox

import "sync/atomic"

// Budget counts the bytes every outbox holds (events queued, being sent or
// waiting to be queued) against a server-wide bound. It never makes anyone
// wait and refuses nothing: passing the bound only signals (Over), so that
// the engine can end the streams of the clients that are not reading.
type Budget struct {
	max  int64         // not positive: no bound, only counted
	held atomic.Int64  // bytes the outboxes hold
	peak atomic.Int64  // the most they held, ever
	over chan struct{} // capacity 1; signalled when held passes max
}

// NewBudget returns a budget of max bytes; not positive: no bound, only
// counted.
func NewBudget(max int) *Budget {
	return &Budget{max: int64(max), over: make(chan struct{}, 1)}
}

// Charge counts n more bytes held (fewer, when negative); passing the
// bound signals Over. While held stays above it the engine looks again on
// its own, so only the crossing signals.
func (g *Budget) Charge(n int) {
	held := g.held.Add(int64(n))
	if n <= 0 {
		return
	}
	for p := g.peak.Load(); held > p && !g.peak.CompareAndSwap(p, held); p = g.peak.Load() {
	}
	if g.max > 0 && held > g.max && held-int64(n) <= g.max {
		select {
		case g.over <- struct{}{}:
		default:
		}
	}
}

// Over receives a value when what the outboxes hold passes the bound.
func (g *Budget) Over() <-chan struct{} { return g.over }

// OverBudget reports whether the outboxes hold more than the bound.
func (g *Budget) OverBudget() bool { return g.max > 0 && g.held.Load() > g.max }

// Max is the bound; not positive: none.
func (g *Budget) Max() int64 { return g.max }

// Held is the bytes the outboxes hold now.
func (g *Budget) Held() int64 { return g.held.Load() }

// Peak is the most the outboxes have held, ever.
func (g *Budget) Peak() int64 { return g.peak.Load() }
