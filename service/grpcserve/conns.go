package grpcserve

import (
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/toolwire/toolwire/internal/connlimit"
)

// A stream the engine ends because its client does not read (its send
// timeout, or the budget of buffered events) still holds memory in gRPC's
// transport: grpc-go gives a handler no way to reset its stream, so the
// messages the transport accepted (up to its 64 KiB write quota and one
// message more) and the trailers wait behind the client's flow-control
// window until the client reads, cancels or disconnects. Measured, 2,000
// such streams held 224 MB that way. Serve therefore keeps a set of its
// connections, and when the streams ended on open connections number more
// than maxEndedStreams, it closes the connection with the most of them,
// which frees them and ends that client's other streams.

// maxEndedStreams bounds the streams ended for not reading that the open
// connections may keep: at two messages of a default maximum result (256
// KiB, in 512 KiB buffers) each, 64 MiB.
const maxEndedStreams = 64

// connSet is the connections Serve accepted, by remote address (what a
// stream's peer names), with the streams ended on each.
type connSet struct {
	log   *slog.Logger
	max   int // maxEndedStreams; tests lower it
	unary unaryWatch

	mu           sync.RWMutex
	conns        map[string]*trackedConn
	byAddr       map[net.Addr]*trackedConn          // the same, by the RemoteAddr value gRPC's peer holds
	ended        int                                // streams ended on the open connections
	unaryRunning atomic.Bool                        // lookAtUnary runs; set under mu
	encoding     chan struct{}                      // large responses being encoded (unary.go)
	closed       atomic.Int64                       // connections closed for their ended streams or unread responses, ever
	limit        atomic.Pointer[connlimit.Listener] // what Serve listens on, bounding the connections
}

func newConnSet(log *slog.Logger, unary unaryWatch) *connSet {
	return &connSet{log: log, max: maxEndedStreams, unary: unary, conns: make(map[string]*trackedConn), byAddr: make(map[net.Addr]*trackedConn),
		encoding: make(chan struct{}, 2*runtime.GOMAXPROCS(0))}
}

// conn is the open connection from addr, or nil.
func (s *connSet) conn(addr net.Addr) *trackedConn {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c := s.byAddr[addr]; c != nil {
		return c
	}
	return s.conns[addr.String()]
}

// listen returns lis with its connections kept in the set, at most max at
// once (max_connections; not positive: no bound).
func (s *connSet) listen(lis net.Listener, max int) net.Listener {
	l := connlimit.Listen(lis, max, "max_connections", s.log)
	s.limit.Store(l)
	return trackedListener{l, s}
}

// refusedCount is the connections closed for max_connections, ever.
func (s *connSet) refusedCount() int64 {
	if l := s.limit.Load(); l != nil {
		return l.Refused()
	}
	return 0
}

type trackedListener struct {
	net.Listener
	set *connSet
}

func (l trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	key := c.RemoteAddr().String()
	s := l.set
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.conns[key]; dup || key == "" || key == "@" {
		return c, nil // an address that names no one connection (a Unix socket's): not kept
	}
	tc := &trackedConn{Conn: c, set: s, key: key, addr: c.RemoteAddr()}
	s.conns[key] = tc
	s.byAddr[tc.addr] = tc
	return tc, nil
}

// trackedConn is a connection in the set; closing it takes it out.
type trackedConn struct {
	net.Conn
	set   *connSet
	key   string
	addr  net.Addr
	wait  waiting // unary responses waiting for the client (unary.go)
	ended int     // streams ended on it; set.mu
	gone  bool    // out of the set; set.mu
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 && c.wait.bytes.Load() > 0 {
		c.wait.wrote(n)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	s := c.set
	s.mu.Lock()
	if !c.gone {
		c.gone = true
		delete(s.conns, c.key)
		delete(s.byAddr, c.addr)
		s.ended -= c.ended
	}
	s.mu.Unlock()
	return c.Conn.Close()
}

// streamEnded counts a stream ended on the connection from addr for not
// reading, closing the connection with the most such streams when the open
// connections keep more than s.max.
func (s *connSet) streamEnded(addr net.Addr) {
	if addr == nil {
		return
	}
	s.mu.Lock()
	c := s.conns[addr.String()]
	if c == nil {
		s.mu.Unlock()
		return
	}
	c.ended++
	s.ended++
	var victim *trackedConn
	if s.ended > s.max {
		for _, x := range s.conns {
			if victim == nil || x.ended > victim.ended {
				victim = x
			}
		}
	}
	var n, total int
	if victim != nil {
		n, total = victim.ended, s.ended
	}
	s.mu.Unlock()
	if victim == nil {
		return
	}
	s.closed.Add(1)
	s.log.Warn("closing the connection whose client left the most streams unread: gRPC cannot free a stream the server ended while its client reads nothing, only its connection",
		"remote_addr", victim.key, "ended_streams", n, "ended_streams_all", total, "max_ended_streams", s.max)
	victim.Close()
}
