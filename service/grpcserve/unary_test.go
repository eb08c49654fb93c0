package grpcserve

import (
	"context"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/internal/testing/h2raw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestUnreadUnaryResponses: a client that asks for large unary responses
// (ListTools of a 500-tool catalog, megabytes each) and reads none of
// them has its connection closed, freeing them: once what waits on
// connections that wrote nothing for a while passes MaxBufferedBytes,
// and, under no budget, once they waited SendTimeout. A client that reads
// the same responses as they come is served, however small the budget.
func TestUnreadUnaryResponses(t *testing.T) {
	t.Parallel()
	catalog := gencatalog.Tools(500)
	for _, tc := range []struct {
		name string
		ec   engine.Config
	}{
		{"past the budget", engine.Config{MaxBufferedBytes: 1 << 20, SendTimeout: time.Hour}},
		{"past the send timeout", engine.Config{MaxBufferedBytes: -1, SendTimeout: 300 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newServedServer(t, tc.ec, catalog...)
			if began := h2raw.Unread(t, s.addr, toolwirev1.ToolService_ListTools_FullMethodName, 3); began < 1 {
				t.Errorf("the connection was closed before any response began; want it closed for responses left unread")
			}
			if n := s.srv.conns.closed.Load(); n != 1 {
				t.Errorf("connections closed: %d; want 1", n)
			}
		})
	}
	t.Run("a client that reads", func(t *testing.T) {
		t.Parallel()
		s := newServedServer(t, engine.Config{MaxBufferedBytes: 1 << 20, SendTimeout: time.Hour}, catalog...)
		// A connection counts as stalled after a minute without a write
		// here, not a second, so that a machine busy enough to pause a
		// reading client that long does not fail the test.
		s.srv.conns.mu.Lock()
		s.srv.conns.unary.stall = time.Minute
		s.srv.conns.mu.Unlock()
		c := s.client(t, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		for range 3 {
			resp, err := c.ListTools(context.Background(), &toolwirev1.ListToolsRequest{})
			if err != nil {
				t.Fatalf("ListTools by a client that reads: %v", err)
			}
			if len(resp.GetTools()) < 500 {
				t.Fatalf("ListTools by a client that reads: %d tools", len(resp.GetTools()))
			}
		}
		if n := s.srv.conns.closed.Load(); n != 0 {
			t.Errorf("connections closed while their clients read: %d; want none", n)
		}
	})
}

// TestLargeResponsesEncodeFewAtOnce: a large unary response is encoded
// only while a slot is free (twice GOMAXPROCS of them), waiting for one
// as long as its client does; a small one never waits.
func TestLargeResponsesEncodeFewAtOnce(t *testing.T) {
	t.Parallel()
	set := newConnSet(slog.New(slog.DiscardHandler), unaryWatch{timeout: -1, budget: -1, tick: time.Hour, stall: time.Hour})
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	c := &trackedConn{set: set, key: addr.String(), addr: addr}
	set.conns[c.key], set.byAddr[addr] = c, c
	large := &toolwirev1.ListToolsResponse{Tools: []*toolwirev1.Tool{{Name: "big", Description: strings.Repeat("x", largeResponse)}}}
	small := &toolwirev1.ListToolsResponse{Tools: []*toolwirev1.Tool{{Name: "small"}}}
	call := func(ctx context.Context, resp *toolwirev1.ListToolsResponse) (any, error) {
		return set.noteUnary(peer.NewContext(ctx, &peer.Peer{Addr: addr}), nil, nil, func(context.Context, any) (any, error) { return resp, nil })
	}
	for range cap(set.encoding) { // every slot taken
		set.encoding <- struct{}{}
	}
	if out, err := call(t.Context(), small); err != nil || out == nil {
		t.Fatalf("a small response with every slot taken: %v, %v; want it encoded", out, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	waiting := make(chan error, 1)
	go func() { _, err := call(ctx, large); waiting <- err }()
	done := make(chan any, 1)
	go func() { out, _ := call(t.Context(), large); done <- out }()
	select {
	case out := <-done:
		t.Fatalf("a large response with every slot taken: %T; want it to wait", out)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-waiting; err != nil && status.Code(err) != codes.Canceled {
		t.Errorf("a large response whose client cancelled: %v; want it to stop waiting, CANCELED", err)
	}
	<-set.encoding // a slot frees
	if out := <-done; reflect.TypeOf(out) != reflect.TypeFor[encoded]() {
		t.Errorf("a large response once a slot freed: %T; want it encoded", out)
	}
	if got, want := c.wait.bytes.Load(), int64(proto.Size(small)+proto.Size(large)); got != want {
		t.Errorf("bytes waiting on the connection: %d; want %d, the two responses encoded", got, want)
	}
}

// TestUnaryWatchProgress: on its own clock, the watch closes a connection
// whose waiting bytes make no progress for the send timeout, but not one
// that keeps up with what it is sent while bytes gRPC dropped unwritten
// stay counted; and it closes one that keeps more than its cap waiting
// for half a second, however it reads its small answers.
func TestUnaryWatchProgress(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	watch := unaryWatch{timeout: 30 * time.Second, budget: -1, cap: 8 << 20, tick: time.Hour, stall: 500 * time.Millisecond,
		clock: func() int64 { return now.Load() }}
	for _, tc := range []struct {
		name      string
		waiting   int64 // bytes left unwritten at the start
		answer    bool  // an answer of 1 KiB noted and written between looks
		looks     int   // 250 ms apart
		wantClose bool
	}{
		{"a response dropped unwritten, the connection busy since", 6 << 20, true, 200, false},
		{"a response dropped unwritten, the connection idle since", 6 << 20, false, 200, true},
		{"more than the cap waiting, small answers read", 9 << 20, true, 3, true},
		{"less than the cap waiting, small answers read", 7 << 20, true, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := newConnSet(slog.New(slog.DiscardHandler), watch)
			set.unaryRunning.Store(true) // the test looks, not the watch's goroutine
			a, b := net.Pipe()
			defer b.Close()
			addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
			c := &trackedConn{Conn: a, set: set, key: addr.String(), addr: addr}
			set.conns[c.key], set.byAddr[addr] = c, c
			set.queued(c, tc.waiting)
			for range tc.looks {
				now.Add(int64(250 * time.Millisecond))
				if tc.answer {
					set.queued(c, 1<<10)
					c.wait.wrote(1 << 10)
				}
				set.closeStalled()
			}
			if closed := set.closed.Load() == 1; closed != tc.wantClose {
				t.Errorf("closed: %v; want %v", closed, tc.wantClose)
			}
		})
	}
}

// TestCompressedResponseLeavesNothingWaiting: a client that accepts gzip
// and reads its listing (sent compressed) has nothing counted as waiting
// once it is read, and its connection, idle or running a long call, is
// not closed for it. gRPC compresses after the interceptors, so the
// uncompressed size was noted and the compressed one written: the rest
// stayed counted, and the connection was closed a SendTimeout after,
// whatever ran on it.
func TestCompressedResponseLeavesNothingWaiting(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{SendTimeout: 300 * time.Millisecond}, gencatalog.Tools(500)...)
	var wire wireSize
	c := s.client(t, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)), grpc.WithStatsHandler(&wire))
	resp, err := c.ListTools(context.Background(), &toolwirev1.ListToolsRequest{})
	if err != nil || len(resp.GetTools()) < 500 {
		t.Fatalf("ListTools: %d tools, %v", len(resp.GetTools()), err)
	}
	if size, onWire := wire.get(); onWire <= 0 || onWire >= size/2 {
		t.Fatalf("the listing came %d bytes on the wire for %d: want it gzipped", onWire, size)
	}
	var waiting int64
	waitFor(t, func() bool {
		s.srv.conns.mu.Lock()
		defer s.srv.conns.mu.Unlock()
		waiting = 0
		for _, tc := range s.srv.conns.conns {
			waiting += tc.wait.bytes.Load()
		}
		return waiting == 0
	})
	time.Sleep(3 * s.srv.conns.unary.stall) // a few looks past the send timeout
	if n := s.srv.conns.closed.Load(); n != 0 {
		t.Errorf("connections closed after their client read its compressed listing: %d; want none", n)
	}
	// A request sent compressed is answered compressed (gRPC's rule),
	// through the same path: it reads back whole.
	resp, err = c.ListTools(context.Background(), &toolwirev1.ListToolsRequest{PageSize: 3}, grpc.UseCompressor("gzip"))
	if err != nil || len(resp.GetTools()) != 3 {
		t.Fatalf("a compressed request's page: %d tools, %v", len(resp.GetTools()), err)
	}
}

// wireSize is a client stats handler that sums the messages received
// and their sizes on the wire.
type wireSize struct{ size, onWire atomic.Int64 }

func (w *wireSize) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w *wireSize) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *wireSize) HandleConn(context.Context, stats.ConnStats)                       {}
func (w *wireSize) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		w.size.Add(int64(in.Length))
		w.onWire.Add(int64(in.CompressedLength))
	}
}
func (w *wireSize) get() (size, onWire int64) { return w.size.Load(), w.onWire.Load() }
