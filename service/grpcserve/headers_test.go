package grpcserve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/h2raw"
	"google.golang.org/grpc/metadata"
)

// TestMetadataOverTheHeaderLimit: a request whose metadata passes
// MaxHeaderBytes is refused when it arrives, whatever the client does
// with the limit the server announces: a client that ignores it (a raw
// HTTP/2 client sending 1 MiB of metadata) has its stream reset, and
// grpc-go's own client refuses to send such a request. Metadata well
// within the limit (a large bearer token) is served, and so is the next
// call after each refusal.
func TestMetadataOverTheHeaderLimit(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{})
	c := s.client(t)
	watch := func(pad int) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("x", pad))
		w, err := c.WatchTools(ctx, &toolwirev1.WatchToolsRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		return err
	}
	if err := watch(32 << 10); err != nil {
		t.Fatalf("32 KiB of metadata: %v; want it served", err)
	}
	if err := watch(MaxHeaderBytes); err == nil {
		t.Error("metadata past MaxHeaderBytes from grpc-go's client: served; want it refused")
	}

	// From a client that ignores the limit: refused, its stream reset or
	// its connection closed (x/net/http2 closes a connection whose header
	// block runs far past the limit), whether the metadata comes in one
	// field or many, just past the limit or far past it.
	if got := h2raw.Headers(t, s.addr, toolwirev1.ToolService_WatchTools_FullMethodName, 1, 1<<10); got != "served" {
		t.Fatalf("1 KiB of metadata over raw HTTP/2: %s; want it served", got)
	}
	for _, tc := range []struct{ fields, size int }{{1, MaxHeaderBytes}, {5, 16 << 10}, {1, 1 << 20}, {64, 16 << 10}} {
		got := h2raw.Headers(t, s.addr, toolwirev1.ToolService_WatchTools_FullMethodName, tc.fields, tc.size)
		if !strings.HasPrefix(got, "RST_STREAM") && !strings.HasPrefix(got, "GOAWAY") && got != "closed" {
			t.Errorf("%d metadata fields of %d bytes from a client that ignores the limit: %s; want the stream reset or the connection closed", tc.fields, tc.size, got)
		}
	}
	if err := watch(1 << 10); err != nil {
		t.Errorf("a call after the refusals: %v", err)
	}
}

// TestStreamsPerConnection: a connection holds at most
// MaxConcurrentStreams RPCs at once. A client that ignores the limit has
// the streams past it refused; grpc-go's client waits instead, and its
// stream is served once another ends.
func TestStreamsPerConnection(t *testing.T) {
	t.Parallel()
	s := newServedSurface(t, engine.Config{}, Config{Limits: Limits{MaxConcurrentStreams: 3}})
	served, refused := h2raw.Streams(t, s.addr, toolwirev1.ToolService_WatchTools_FullMethodName, 5)
	if served != 3 || refused != 2 {
		t.Errorf("5 streams at once on one connection past a limit of 3: %d served, %d refused; want 3 and 2", served, refused)
	}

	c := s.client(t)
	var cancels []context.CancelFunc
	for range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		cancels = append(cancels, cancel)
		w, err := c.WatchTools(ctx, &toolwirev1.WatchToolsRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fourth := make(chan error, 1)
	go func() {
		w, err := c.WatchTools(t.Context(), &toolwirev1.WatchToolsRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		fourth <- err
	}()
	cancels[0]()
	if err := <-fourth; err != nil {
		t.Errorf("a fourth stream once one of three ended: %v; want it served", err)
	}
	for _, cancel := range cancels {
		cancel()
	}
}
