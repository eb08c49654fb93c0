package grpcserve

import (
	"context"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/internal/testing/h2raw"
	"google.golang.org/grpc"
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
