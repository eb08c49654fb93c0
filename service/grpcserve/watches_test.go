package grpcserve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWatchToolsBounded: over a real socket, one caller holds at most
// max_watches_per_caller WatchTools streams; one more is refused with
// RESOURCE_EXHAUSTED naming the bound, and a stream that ends gives its
// place back.
func TestWatchToolsBounded(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{MaxWatchesPerCaller: 2})
	c := s.client(t)
	watch := func(ctx context.Context) error {
		w, err := c.WatchTools(ctx, &toolwirev1.WatchToolsRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		return err
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, endFirst := context.WithCancel(ctx)
	defer endFirst()
	if err := watch(first); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if err := watch(ctx); err != nil {
		t.Fatalf("second stream: %v", err)
	}
	err := watch(ctx)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "(max_watches_per_caller)") {
		t.Fatalf("a third stream: %v; want RESOURCE_EXHAUSTED naming max_watches_per_caller", err)
	}

	// The server counts a stream as ended once its handler returned, a
	// moment after the client ended it: wait for the place.
	endFirst()
	deadline := testenv.Deadline(t)
	for {
		err := watch(ctx)
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("a stream after one ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
