package grpcserve

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestMessageCodecBufferFitsMessage: an encoded event holds a buffer within
// twice its size. Before, gRPC's codec put a 100 KiB result in a 1 MiB
// buffer, which a stalled stream kept while the transport waited for its
// reader: from outside, 200 stalled streams of read_file results took the
// server's heap to 655-772 MB and its RSS to 1.39-1.45 GB (395 MB and
// 0.86-0.89 GB with this codec).
// heldBytes is the capacity of the buffers data holds.
func heldBytes(data mem.BufferSlice) int {
	n := 0
	for _, b := range data {
		n += cap(b.ReadOnlyData())
	}
	return n
}

func TestMessageCodecBufferFitsMessage(t *testing.T) {
	t.Parallel()
	codec := messageCodec{defaultProtoCodec()}
	for _, size := range []int{10, 40 << 10, 100 << 10, 130_000, 3 << 20} {
		ev := &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Result{Result: &toolwirev1.CallResult{
			CallId:  "c",
			Content: []*toolwirev1.Content{{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: strings.Repeat("x", size)}}}},
		}}}
		data, err := codec.Marshal(ev)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		encoded := data.Materialize()
		n := proto.Size(ev)
		if held := heldBytes(data); n > 32<<10 && held > 2*n {
			t.Errorf("a %d-byte event holds a %d-byte buffer, want at most twice its size", n, held)
		}
		data.Free()
		got := &toolwirev1.ExecuteBatchResponse{}
		if err := proto.Unmarshal(encoded, got); err != nil {
			t.Fatalf("%d bytes: decoding: %v", size, err)
		}
		if diff := cmp.Diff(ev, got, protocmp.Transform()); diff != "" {
			t.Errorf("%d bytes: round trip (-want +got):\n%s", size, diff)
		}
	}
}

// TestMessageCodecSmallEvents: an event below gRPC's pooling threshold
// (most are: a CallStarted is a few dozen bytes) is encoded as gRPC's codec
// encodes it, the same bytes in a buffer of its size, in two allocations
// where gRPC's codec makes three (and sizes the message twice).
func TestMessageCodecSmallEvents(t *testing.T) {
	codec, grpcCodec := messageCodec{defaultProtoCodec()}, defaultProtoCodec()
	events := []*toolwirev1.ExecuteBatchResponse{
		{}, // encodes to nothing
		{Seq: 2, Event: &toolwirev1.ExecuteBatchResponse_Started{Started: &toolwirev1.CallStarted{CallId: "call-1"}}},
	}
	// Around the threshold (gRPC's: 1 KiB), on both sides of it.
	const threshold = 1 << 10
	if !mem.IsBelowBufferPoolingThreshold(threshold) || mem.IsBelowBufferPoolingThreshold(threshold+1) {
		t.Fatal("gRPC's pooling threshold is no longer 1 KiB; move the sizes below")
	}
	for n := threshold - 30; n <= threshold; n++ {
		events = append(events, &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Result{Result: &toolwirev1.CallResult{
			CallId:  "c",
			Content: []*toolwirev1.Content{{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: strings.Repeat("x", n)}}}},
		}}})
	}
	small, atThreshold := 0, false
	for _, ev := range events {
		want, err := grpcCodec.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := codec.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		n := proto.Size(ev)
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Errorf("a %d-byte event: encoded as %x, gRPC's codec: %x", n, got.Materialize(), want.Materialize())
		}
		if got.Len() != n {
			t.Errorf("a %d-byte event: encoding is %d bytes", n, got.Len())
		}
		if !mem.IsBelowBufferPoolingThreshold(n) {
			continue
		}
		small++
		atThreshold = atThreshold || n == threshold
		if held := heldBytes(got); held != n {
			t.Errorf("a %d-byte event holds %d bytes", n, held)
		}
		got.Free() // a SliceBuffer's: nothing to give back, and harmless
		if allocs := testing.AllocsPerRun(100, func() {
			if _, err := codec.Marshal(ev); err != nil {
				t.Fatal(err)
			}
		}); allocs > 2 {
			t.Errorf("a %d-byte event: %v allocations to encode, want at most 2", n, allocs)
		}
	}
	if small < 4 || small == len(events) || !atThreshold {
		t.Fatalf("%d of %d events are below the threshold (one at it: %v); the test needs some on each side", small, len(events), atThreshold)
	}
}

// TestStalledStreamsHoldTheirBudget: through a real server, what stalled
// streams hold is about their budget, not a megabyte buffer for each event
// the transport is sending. With MaxParallel 1 a stalled stream holds its
// 256 KiB budget, one waiting result, and the event or two in the
// transport: about 700-860 KiB measured; the test allows 1.5 MiB. Before,
// each event in the transport held a 1 MiB buffer (2,632 KiB a stream).
func TestStalledStreamsHoldTheirBudget(t *testing.T) {
	// Not parallel: it measures the heap.
	blob := tools.Tool{Name: "blob", Description: "returns 100 KiB", Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return tools.Text(strings.Repeat("x", 100<<10)), nil
		}}
	s := newServedServer(t, engine.Config{MaxStreamBufferBytes: 256 << 10, MaxParallel: 1}, blob)
	slow := s.slowClient(t)
	const streams = 20
	heapBefore := heapInUse()
	for i := range streams {
		req := &toolwirev1.ExecuteBatchRequest{}
		for j := range 64 {
			req.Calls = append(req.Calls, call(fmt.Sprintf("s%d-%d", i, j), "blob", ""))
		}
		stalled(t, slow, req)
	}
	waitFor(t, func() bool { return s.srv.waitingToReport() == streams })
	perStream := (heapInUse() - heapBefore) / streams
	t.Logf("%d KiB of heap a stalled stream", perStream>>10)
	if perStream > 3<<19 {
		t.Errorf("a stalled stream holds %d KiB of heap, want under 1536 KiB (a 256 KiB budget, one waiting result, the transport's events)", perStream>>10)
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
