// Package connlimit bounds the connections a listener keeps open, and says
// when it cannot accept any. Each
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
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolwire/toolwire/internal/monotime"
)

// logEvery is how often refused connections, and failures to accept, are
// logged at most.
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
	lastLog atomic.Int64 // monotime.Now of the last log line; 0: none yet

	failed     atomic.Int64 // accepts that failed since one last succeeded
	lastFailed atomic.Int64 // monotime.Now of the last line logging them; 0: none yet
	warned     atomic.Bool  // a failure was logged and no accept has succeeded since
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
			l.fail(err)
			return nil, err
		}
		if l.warned.Load() && l.warned.CompareAndSwap(true, false) {
			l.log.Info("accepting connections again", "addr", l.Addr().String(), "failed", l.failed.Swap(0))
		}
		if n := l.open.Add(1); l.max > 0 && n > l.max {
			l.open.Add(-1)
			l.refuse() // counted before the client can see the close
			c.Close()
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
	now := monotime.Now()
	last := l.lastLog.Load()
	if last != 0 && now-last < int64(logEvery) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	since := n - l.logged.Swap(n)
	l.log.Warn("connections refused: the most allowed are open", "refused", since, "open", l.open.Load(), "max", l.max, "setting", l.setting)
}

// fail logs a failure to accept, at most once every logEvery. The servers
// above retry a temporary one with a backoff (net/http and grpc-go, 5 ms
// doubling to 1 s) and log it nowhere an operator looks: a server out of
// file descriptors (EMFILE, under a low ulimit -n) left its clients
// waiting in the listen backlog with nothing in its log.
func (l *Listener) fail(err error) {
	if errors.Is(err, net.ErrClosed) {
		return
	}
	n := l.failed.Add(1)
	now := monotime.Now()
	last := l.lastFailed.Load()
	if last != 0 && now-last < int64(logEvery) || !l.lastFailed.CompareAndSwap(last, now) {
		return
	}
	l.warned.Store(true)
	msg := "cannot accept connections; new ones wait in the listen backlog"
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		msg = "cannot accept connections: out of file descriptors (raise ulimit -n, or lower max_connections and http_max_connections); new ones wait in the listen backlog"
	}
	l.log.Warn(msg, "addr", l.Addr().String(), "error", err.Error(), "failed", n, "open", l.open.Load())
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
