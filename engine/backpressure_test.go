package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// bigEchoes returns a batch of n echo calls, each returning about size
// bytes twice (as text and as structured content), keyed when keyed.
func bigEchoes(prefix string, n, size int, keyed bool) *toolwirev1.ExecuteBatchRequest {
	text := strings.Repeat("x", size)
	req := &toolwirev1.ExecuteBatchRequest{}
	for i := range n {
		c := call(fmt.Sprintf("%s%d", prefix, i), "echo", fmt.Sprintf(`{"text":%q}`, text))
		if keyed {
			c.IdempotencyKey = c.CallId
		}
		req.Calls = append(req.Calls, c)
	}
	return req
}

// stall runs req on te for a client that reads nothing after BatchAccepted
// (a stalledSink), until the test ends.
func stall(t *testing.T, te *testBed, req *toolwirev1.ExecuteBatchRequest) *stalledSink {
	t.Helper()
	sink := newStalledSink()
	done := runAsync(te.e, te.reg.Snapshot(), req, sink)
	t.Cleanup(func() { sink.StopSend(errors.New("test over")); <-done })
	return sink
}

func TestSlowReaderHoldsMemoryNotSlots(t *testing.T) {
	t.Parallel()
	// Before: a call waiting to send its result kept its slot, so a stream
	// nobody read held up to max_parallel slots and locked others out.
	te := newTestBed(t, Config{
		MaxStreamBufferBytes: 256 << 10,
		MaxConcurrentCalls:   4,
		MaxQueueWait:         500 * time.Millisecond,
	})
	stall(t, te, bigEchoes("slow", 32, 100<<10, false))
	// The calls that ran wait to report, holding no slot (before, 4 stayed
	// taken for good).
	waitFor(t, func() bool { st := te.e.Stats(); return st.WaitingToReport == 1 && st.CallsRunning == 0 })
	got := te.run(t, bigEchoes("n", 8, 10, false))
	for id, r := range results(t, got) {
		if r.GetIsError() {
			t.Errorf("%s beside the slow reader: %q", id, text(r))
		}
	}
}

func TestAbandonedToolKeepsItsSlotUntilItReturns(t *testing.T) {
	t.Parallel()
	// Before: abandoning a tool gave its slot back, so a caller could stack
	// tools that ignore cancellation without limit.
	te := newTestBed(t, Config{AbandonGrace: time.Millisecond, MaxConcurrentCalls: 1, MaxQueueWait: 20 * time.Millisecond})
	events, err := te.runErr(context.Background(), &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{
			{CallId: "a", Name: "hold_stubborn", Timeout: durationpb.New(time.Millisecond)},
			{CallId: "b", Name: "echo", Arguments: `{"text":"b"}`, Timeout: durationpb.New(30 * time.Millisecond)},
		},
		Options: &toolwirev1.BatchOptions{Sequential: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := results(t, events)
	if r := got["a"]; !strings.Contains(text(r), "abandoned") {
		t.Fatalf("stubborn call's result = %v, want it abandoned", r)
	}
	// The batch goes on; its next call finds no slot and says so.
	if r := got["b"]; r.GetErrorKind() != kindTimeout || !strings.Contains(text(r), "free slot") {
		t.Errorf("call after the abandoned one = %v %q, want TIMEOUT waiting for a free slot", r.GetErrorKind(), text(r))
	}
	if events[len(events)-1].GetFinished() == nil {
		t.Error("no BatchFinished")
	}
	if _, err := te.runErr(context.Background(), calls(call("c", "echo", `{"text":"next"}`))); CodeOf(err) != ResourceExhausted {
		t.Errorf("batch while the abandoned tool runs: err = %v, want ResourceExhausted", err)
	}
	te.hold.releaseAll() // the abandoned tool returns at last, and its slot with it
	waitFor(t, func() bool { return te.e.Stats().CallsRunning == 0 })
	events, err = te.runErr(context.Background(), calls(call("d", "echo", `{"text":"next"}`)))
	if err != nil || !strings.Contains(text(results(t, events)["d"]), "next") {
		t.Errorf("batch after the abandoned tool returned: %v %v; want it run", err, events)
	}
}
