package grpcserve

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// grpc-go queues a unary handler's response in its transport and returns:
// a client that reads nothing (its HTTP/2 window left shut, or its socket
// unread) leaves the response there for as long as the connection lives,
// and nothing the handler does can free it. Measured, 200 ListTools of a
// 2,000-tool catalog on one connection whose client read nothing held 3.2
// GB of the server's memory; a request of a few bytes pins a response of
// megabytes. The engine's send watchdog covers batch streams, whose
// handler waits in Send; this covers unary responses, as writewatch does
// on the HTTP port.
//
// Serve notes each unary response's size on its connection (noteUnary),
// and the connection counts down what it writes to the socket: what is
// left is what waits for its client. Looked at every tick, a connection
// makes progress when fewer bytes wait than at the look before, or when
// it wrote as much since as was noted: a client asking for more than it
// reads makes none, though the answers' headers are writes, and one that
// keeps up makes it even while bytes gRPC dropped unwritten (a response
// its client cancelled on its way) stay counted. A connection that made
// none for SendTimeout is closed, and so, while the responses waiting on
// connections that made none for half a second pass MaxBufferedBytes, is
// the one with the most. Progress is counted per connection, not per
// stream, so a client could read its small answers and leave its large
// ones unread: a connection that keeps more than twice the largest
// listing (or MaxBufferedBytes) waiting for half a second is closed
// whatever its progress. What gRPC dropped unwritten on a connection that
// then goes quiet counts against it: such a connection may be closed, and
// its client reconnects at its next call.

// unaryWatch is how the connections' waiting responses are looked at:
// every tick, a connection stalled once nothing was written for stall.
type unaryWatch struct {
	timeout time.Duration // SendTimeout; not positive: none
	budget  int64         // MaxBufferedBytes; negative: none
	cap     int64         // most one connection may keep waiting for stall, progress or not; 0: none
	clock   func() int64  // nil: clock; tests set their own
	tick    time.Duration
	stall   time.Duration
}

// waiting is the part of a trackedConn that counts its unary responses
// waiting for the client.
type waiting struct {
	bytes    atomic.Int64 // noted and not yet written (at least 0)
	noted    atomic.Int64 // bytes noted, ever
	written  atomic.Int64 // bytes written while some waited, ever
	progress atomic.Int64 // clock() when bytes began to wait, or the connection last made progress

	// At the last look; connSet.mu.
	last, lastNoted, lastWritten, looked int64
	over                                 time.Duration // how long bytes have stayed above the cap
}

// noteUnary is the unary interceptor Serve installs, the outermost: it
// encodes each response and notes its size on the connection it goes out
// on. It encodes it here, not leaving it to gRPC, so that the wait is
// counted from when the response is ready to write (encoding a large
// listing takes a while); the codec passes the encoding on (encoded).
func (s *connSet) noteUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	// A response whose client already went (cancelled, past its
	// deadline) is not sent at all.
	m, ok := resp.(proto.Message)
	if !ok || err != nil || ctx.Err() != nil {
		return resp, err
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return resp, nil
	}
	c := s.conn(p.Addr)
	if c == nil {
		return resp, nil
	}
	size := proto.Size(m)
	if size >= largeResponse {
		// Encoding is CPU work: more large responses at once than the
		// CPUs can encode gains nothing and holds each one's memory.
		select {
		case s.encoding <- struct{}{}:
			defer func() { <-s.encoding }()
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	data, err := unaryCodec.marshal(m, size)
	if err != nil {
		return resp, nil // gRPC's own encoding reports it
	}
	if sc, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ SendCompress() string }); ok && sc.SendCompress() == grpcgzip.Name {
		// Sent compressed: what waits is the compressed bytes (gzip.go).
		z, err := gzipped(data)
		data.Free()
		if err != nil {
			return resp, nil // gRPC's own compression reports it
		}
		data = z
	}
	s.queued(c, int64(data.Len()))
	return encoded{data}, nil
}

// largeResponse is the size from which noteUnary encodes a response only
// while fewer than twice GOMAXPROCS others are being encoded: 200
// listings of a 2,000-tool catalog asked for at once held 2.9 GB while
// they were encoded together.
const largeResponse = 1 << 20

// unaryCodec is the codec noteUnary encodes with: ServerOptions's.
var unaryCodec = messageCodec{defaultProtoCodec()}

// encoded is a response noteUnary has encoded, which messageCodec sends
// as it is.
type encoded struct{ data mem.BufferSlice }

// queued notes n bytes waiting to be written on c.
func (s *connSet) queued(c *trackedConn, n int64) {
	if n <= 0 {
		return
	}
	c.wait.noted.Add(n)
	if c.wait.bytes.Add(n) == n {
		c.wait.progress.Store(s.unary.now())
		s.watchUnary()
	}
}

// wrote counts n bytes written on c against its waiting responses.
func (w *waiting) wrote(n int) {
	w.written.Add(int64(n))
	for {
		b := w.bytes.Load()
		if b <= 0 {
			return
		}
		if w.bytes.CompareAndSwap(b, max(0, b-int64(n))) {
			return
		}
	}
}

// watchUnary starts the goroutine that looks at the waiting responses,
// unless it runs; it stops once none waits.
func (s *connSet) watchUnary() {
	if s.unaryRunning.Load() {
		return // the usual case: no lock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unaryRunning.Load() || (s.unary.timeout <= 0 && s.unary.budget < 0) {
		return
	}
	s.unaryRunning.Store(true)
	go s.lookAtUnary()
}

func (s *connSet) lookAtUnary() {
	t := time.NewTicker(s.unary.tick)
	defer t.Stop()
	for range t.C {
		if !s.closeStalled() {
			return
		}
	}
}

// closeStalled closes the connections whose responses waited too long, or
// hold too much, and reports whether any response still waits; when none
// does it marks the watch stopped.
func (s *connSet) closeStalled() (waiting bool) {
	now := s.unary.now()
	type stalled struct {
		c     *trackedConn
		bytes int64
		idle  time.Duration
	}
	var victims, stalls []stalled
	var held int64
	s.mu.Lock()
	for _, c := range s.conns {
		b := c.wait.bytes.Load()
		if b <= 0 {
			c.wait.last, c.wait.over = 0, 0
			continue
		}
		waiting = true
		// Progress is fewer bytes waiting than at the last look, or as
		// many written since as were noted: a connection whose client asks
		// for more than it reads makes none, though the requests' answers
		// begin (their headers are writes); one that keeps up makes it,
		// though bytes gRPC dropped unwritten (a response cancelled on its
		// way) stay counted.
		noted, written := c.wait.noted.Load(), c.wait.written.Load()
		if b < c.wait.last || (noted > c.wait.lastNoted && written-c.wait.lastWritten >= noted-c.wait.lastNoted) {
			c.wait.progress.Store(now)
		}
		// Above the cap, waiting as much or more for stall, a connection
		// is closed whatever its progress: a client can read its small
		// answers and leave its large ones unread.
		if s.unary.cap > 0 && b > s.unary.cap && c.wait.last > s.unary.cap {
			c.wait.over += time.Duration(now - c.wait.looked)
		} else {
			c.wait.over = 0
		}
		c.wait.last, c.wait.lastNoted, c.wait.lastWritten, c.wait.looked = b, noted, written, now
		idle := time.Duration(now - c.wait.progress.Load())
		switch {
		case c.wait.over >= s.unary.stall:
			victims = append(victims, stalled{c, b, c.wait.over})
		case s.unary.timeout > 0 && idle >= s.unary.timeout:
			victims = append(victims, stalled{c, b, idle})
		case idle >= s.unary.stall:
			stalls = append(stalls, stalled{c, b, idle})
			held += b
		}
	}
	for s.unary.budget >= 0 && held > s.unary.budget && len(stalls) > 0 {
		most := 0
		for i, x := range stalls {
			if x.bytes > stalls[most].bytes {
				most = i
			}
		}
		victims = append(victims, stalls[most])
		held -= stalls[most].bytes
		stalls = append(stalls[:most], stalls[most+1:]...)
	}
	if !waiting {
		s.unaryRunning.Store(false)
		// A response noted since the look above may have seen the watch
		// running (watchUnary's unlocked path): look once more, after the
		// store, so that it is watched.
		for _, c := range s.conns {
			if c.wait.bytes.Load() > 0 {
				s.unaryRunning.Store(true)
				waiting = true
				break
			}
		}
	}
	s.mu.Unlock()
	for _, v := range victims {
		s.closed.Add(1)
		s.log.Warn("closing the connection whose client left responses unread: gRPC cannot free a response its client does not read, only its connection",
			"remote_addr", v.c.key, "waiting_bytes", v.bytes, "unread_for", v.idle.Round(time.Millisecond), "send_timeout", s.unary.timeout, "max_buffered_bytes", s.unary.budget)
		v.c.Close()
	}
	return waiting
}

func (w unaryWatch) now() int64 {
	if w.clock != nil {
		return w.clock()
	}
	return clock()
}

// start anchors clock to the monotonic clock.
var start = time.Now()

// clock is the monotonic time since start, in nanoseconds.
func clock() int64 { return int64(time.Since(start)) }
