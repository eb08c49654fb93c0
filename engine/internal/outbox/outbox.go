// Package outbox holds a batch's events between the calls that emit them
// and the batch's one writer, bounded in bytes and in count (Outbox), and
// counts what every outbox holds against one server-wide budget (Budget).
// It knows nothing of batches: the engine decides what to do when a client
// stops reading (its send watchdog ends streams; the budget only counts
// and signals).
package outbox

import (
	"sync"
	"sync/atomic"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// Outbox holds a batch's events between the calls that emit them and the
// stream's one writer. It is bounded in bytes (the events' encoded size) and
// in count, counting the event the writer is sending until Send returns, so
// a client that reads slowly costs the server at most the budget per batch
// and the calls waiting to report are held back, not buffered.
//
// Waiters are admitted first come, first served, so a large result is not
// overtaken forever by a stream of small progress reports. An event larger
// than the whole budget is admitted once nothing else is pending: progress
// is always possible.
//
// What it holds also counts against the engine's server-wide budget
// (Budget): the events queued or being sent and those waiting to be
// queued, from Put until they are sent or dropped.
//
// It is hand-written rather than golang.org/x/sync/semaphore plus a channel
// because both would cost allocations on every batch, and a one-call batch
// is kept to the allocations it had with a plain channel (see the engine's
// benchmarks). Its zero value is unusable: Init it, in place (a batch holds
// its outbox by value).
type Outbox struct {
	mu       sync.Mutex
	queue    []Pending // queue[head:] wait for the writer, in order
	head     int
	bytes    int // of the events queued or being sent
	count    int
	maxBytes int
	maxCount int
	waiters  []*outboxWaiter // first come, first served
	room     chan struct{}   // closed when the writer frees budget; nil until WaitRoom needs it
	closed   bool
	doorbell chan struct{} // wakes the writer; capacity 1
	parked   func()        // wakes a writer that Take parked; nil when none is
	backing  [4]Pending    // the queue's first array: a small batch needs no other

	budget *Budget      // the server's; nil: none
	held   atomic.Int64 // bytes this outbox holds of the budget: queued, being sent and waiting
}

// Pending is an event with the bytes it holds of the budget.
type Pending struct {
	Event *toolwirev1.ExecuteBatchResponse
	n     int
}

type outboxWaiter struct {
	p     Pending
	ready chan struct{} // closed once the event is queued
}

// Init readies o to hold at most maxBytes of events (counting their
// encoded size) and maxCount of them, charging what it holds to b (nil:
// no budget).
func (o *Outbox) Init(maxBytes, maxCount int, b *Budget) {
	o.maxBytes, o.maxCount, o.budget = maxBytes, maxCount, b
	o.queue = o.backing[:0]
	o.doorbell = make(chan struct{}, 1)
}

// fits reports whether n more bytes may be queued now.
func (o *Outbox) fits(n int) bool {
	if o.count == 0 {
		return true // alone, even an event over the budget goes
	}
	return o.bytes+n <= o.maxBytes && o.count < o.maxCount
}

// Put queues ev, whose encoded size is n, waiting while the budget is spent.
// It returns false, dropping ev, when done closes first. A forced event is
// queued at once, over the budget if need be: the one CallStarted of a call
// that holds a concurrency slot must not wait for a slow reader.
func (o *Outbox) Put(done <-chan struct{}, ev *toolwirev1.ExecuteBatchResponse, n int, force bool) bool {
	p := Pending{Event: ev, n: n}
	o.charge(n) // while it waits, too: its memory is held all the same
	o.mu.Lock()
	if force || (len(o.waiters) == 0 && o.fits(n)) {
		o.push(p)
		o.mu.Unlock()
		return true
	}
	w := &outboxWaiter{p: p, ready: make(chan struct{})}
	o.waiters = append(o.waiters, w)
	o.mu.Unlock()
	select {
	case <-w.ready:
		return true
	case <-done:
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	select {
	case <-w.ready:
		return true // queued meanwhile: the writer sends or drops it
	default:
	}
	for i, x := range o.waiters {
		if x == w {
			o.waiters = append(o.waiters[:i], o.waiters[i+1:]...)
			break
		}
	}
	o.admit() // the head may have changed
	o.charge(-n)
	return false
}

// charge counts n more bytes (less, when negative) as held by this outbox
// and against the budget.
func (o *Outbox) charge(n int) {
	o.held.Add(int64(n))
	if o.budget != nil {
		o.budget.Charge(n)
	}
}

// push queues p; o.mu is held.
func (o *Outbox) push(p Pending) {
	if o.head > 0 && len(o.queue) == cap(o.queue) {
		n := copy(o.queue, o.queue[o.head:])
		clear(o.queue[n:])
		o.queue, o.head = o.queue[:n], 0
	}
	o.queue = append(o.queue, p)
	o.bytes += p.n
	o.count++
	o.unpark()
	select {
	case o.doorbell <- struct{}{}:
	default:
	}
}

// admit queues the waiters that now fit, in order; o.mu is held.
func (o *Outbox) admit() {
	for len(o.waiters) > 0 && o.fits(o.waiters[0].p.n) {
		w := o.waiters[0]
		o.waiters[0] = nil
		o.waiters = o.waiters[1:]
		o.push(w.p)
		close(w.ready)
	}
}

// Next returns the next event to send, waiting for one; false once the
// outbox is closed and empty. Give it back with Sent once it is sent (or
// dropped).
func (o *Outbox) Next() (Pending, bool) {
	for {
		o.mu.Lock()
		if o.head < len(o.queue) {
			p := o.queue[o.head]
			o.queue[o.head] = Pending{}
			if o.head++; o.head == len(o.queue) {
				o.queue, o.head = o.queue[:0], 0
			}
			o.mu.Unlock()
			return p, true
		}
		if o.closed {
			o.mu.Unlock()
			return Pending{}, false
		}
		o.mu.Unlock()
		<-o.doorbell
	}
}

// Take takes every event queued, in order, appended to buf: what a writer
// that writes groups (a detached batch's, to its store) writes at once.
// open is false once the outbox is closed and nothing follows the events
// taken. Give each back with Sent once it is written (or dropped).
//
// When nothing is queued and the outbox is open, Take does not wait: it
// takes nothing, returns parked, and calls wake once the next event is
// queued or the outbox closes, so that the writer can give its goroutine
// up meanwhile (a batch whose calls wait for approval for hours held one
// each, its stack and all) and be started again by wake. wake is called
// with o's lock held: it must not block or call o. With a nil wake Take
// does not park: it takes nothing and returns open.
func (o *Outbox) Take(buf []Pending, wake func()) (ps []Pending, open, parked bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.head < len(o.queue) {
		buf = append(buf, o.queue[o.head:]...)
		clear(o.queue[o.head:])
		o.queue, o.head = o.queue[:0], 0
		return buf, !o.closed, false
	}
	if o.closed {
		return buf, false, false
	}
	if wake == nil {
		return buf, true, false
	}
	o.parked = wake
	return buf, true, true
}

// unpark calls the wake of a writer parked by Take, once; o.mu is held.
func (o *Outbox) unpark() {
	if w := o.parked; w != nil {
		o.parked = nil
		w()
	}
}

// Sent gives back the budget an event held, once Send has returned.
func (o *Outbox) Sent(p Pending) {
	o.mu.Lock()
	o.bytes -= p.n
	o.count--
	o.admit()
	if o.room != nil {
		close(o.room)
		o.room = nil
	}
	o.mu.Unlock()
	o.charge(-p.n)
}

// HasRoom reports whether the outbox has room now: what WaitRoom waits
// for. Asking first spares a caller with room its context's Done channel,
// which a context makes when first asked for it.
func (o *Outbox) HasRoom() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hasRoom()
}

// hasRoom is HasRoom with o.mu held.
func (o *Outbox) hasRoom() bool {
	return len(o.waiters) == 0 && o.bytes < o.maxBytes && o.count < o.maxCount
}

// WaitRoom waits while the outbox is full (its budget spent, or calls
// waiting to report) or until done closes. A batch starts a call only after
// it: the result of a call started while the client reads nothing would
// only wait too, holding its memory.
func (o *Outbox) WaitRoom(done <-chan struct{}) {
	for {
		o.mu.Lock()
		if o.hasRoom() {
			o.mu.Unlock()
			return
		}
		if o.room == nil {
			o.room = make(chan struct{})
		}
		room := o.room
		o.mu.Unlock()
		select {
		case <-room:
		case <-done:
			return
		}
	}
}

// Close tells the writer no more events come after those queued.
func (o *Outbox) Close() {
	o.mu.Lock()
	o.closed = true
	o.unpark()
	o.mu.Unlock()
	select {
	case o.doorbell <- struct{}{}:
	default:
	}
}

// Queued is how many events wait for the writer to take them.
func (o *Outbox) Queued() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue) - o.head
}

// Waiting reports whether calls wait for room to report.
func (o *Outbox) Waiting() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.waiters) > 0
}

// Held is the bytes o holds of the budget: queued, being sent and waiting
// to be queued.
func (o *Outbox) Held() int64 { return o.held.Load() }
