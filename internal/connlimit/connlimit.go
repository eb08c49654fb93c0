// Package connlimit bounds the connections a listener keeps open. Each
// open connection holds memory whether or not it carries a request (a
// gRPC connection about 50 KiB: its transport's buffers and goroutines),
// and a file descriptor, so without a bound a client that opens
// connections and leaves them idle holds memory and descriptors without
// end. A connection accepted past the bound is closed at once rather than
// left unaccepted: its client learns now that this server is full and,
// behind a load balancer, tries another, where a connection waiting in the
// kernel's backlog would hang until the client's own timeout.
package connlimit

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// logEvery is how often refused connections are logged at most.
const logEvery = 10 * time.Second

// Listener is a net.Listener that keeps at most Max connections open.
type Listener struct {
	net.Listener
	max     int64
	setting string // the setting that sets max, named in the log
	log     *slog.Logger

	open    atomic.Int64
	refused atomic.Int64 // connections closed for the bound, ever
	logged  atomic.Int64 // refused when last logged
	lastLog atomic.Int64 // Unix ns of the last log line
}

// Listen returns lis bounded to max open connections; not positive: no
// bound. setting names the configuration key that sets max, for the log.
func Listen(lis net.Listener, max int, setting string, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: lis, max: int64(max), setting: setting, log: log}
}

// Accept returns the next connection within the bound, closing those
// past it as they come.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max > 0 && n > l.max {
			l.open.Add(-1)
			c.Close()
			l.refuse()
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// Open is the number of connections open now.
func (l *Listener) Open() int64 { return l.open.Load() }

// Refused is the number of connections closed for the bound, ever.
func (l *Listener) Refused() int64 { return l.refused.Load() }

func (l *Listener) refuse() {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(logEvery) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	since := n - l.logged.Swap(n)
	l.log.Warn("connections refused: the most allowed are open", "refused", since, "open", l.open.Load(), "max", l.max, "setting", l.setting)
}

// conn is an accepted connection; closing it frees its place.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
