// Package inflight closes a source's connection once the calls that began
// on it have returned. A connection a reload replaced (or that broke) is
// retired: no call begins on it from then on, but those in flight finish
// on it, each bounded by its own deadline, so that a long call ends with
// its result, and its cancellation still reaches the upstream. Closing it
// at once failed them ("grpc: the client connection is closing"), and a
// call that had run was reported lost, to be sent again.
//
// The gRPC sources (sources/grpcsource, sources/remote) keep their
// connections with it, as the MCP gateway keeps its sessions.
//
// It imports only the standard library.
package inflight

import "sync"

// Calls counts the calls in flight on one connection.
type Calls struct {
	close func()
	done  chan struct{} // closed once close has returned

	mu      sync.Mutex
	n       int
	retired bool
}

// New returns the count of a connection that close closes.
func New(close func()) *Calls {
	return &Calls{close: close, done: make(chan struct{})}
}

// Begin reports whether a call may begin on the connection, counting it
// if so; End must follow. Once Retire has been called, none may.
func (c *Calls) Begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return false
	}
	c.n++
	return true
}

// End ends a call Begin counted, closing a retired connection when it
// was the last.
func (c *Calls) End() {
	c.mu.Lock()
	c.n--
	last := c.retired && c.n == 0
	c.mu.Unlock()
	if last {
		c.finish()
	}
}

// Retire refuses new calls and closes the connection once those in flight
// have ended: at once when there are none, else in the last one's End. It
// does not wait; Done is closed when the connection is.
func (c *Calls) Retire() {
	c.mu.Lock()
	if c.retired {
		c.mu.Unlock()
		return
	}
	c.retired = true
	idle := c.n == 0
	c.mu.Unlock()
	if idle {
		c.finish()
	}
}

// Done is closed once a retired connection has been closed.
func (c *Calls) Done() <-chan struct{} { return c.done }

func (c *Calls) finish() {
	c.close()
	close(c.done)
}
