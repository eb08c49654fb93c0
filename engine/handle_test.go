package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// batchIDOf returns the batch ID a BatchAccepted among events names.
func batchIDOf(tb testing.TB, events []*toolwirev1.ExecuteBatchResponse) string {
	tb.Helper()
	for _, ev := range events {
		if a := ev.GetAccepted(); a != nil {
			return a.GetBatchId()
		}
	}
	tb.Fatal("no BatchAccepted")
	return ""
}

func (r *recorder) get() []*toolwirev1.ExecuteBatchResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*toolwirev1.ExecuteBatchResponse(nil), r.events...)
}

func (lb *liveBatch) snapshot() []*toolwirev1.ExecuteBatchResponse {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return append([]*toolwirev1.ExecuteBatchResponse(nil), lb.events...)
}

// startDetached runs req detached with ctx in the background, as
// startBatch does.
func startDetached(tb testing.TB, ctx context.Context, te *testBed, req *toolwirev1.ExecuteBatchRequest) *liveBatch {
	tb.Helper()
	req.Options = &toolwirev1.BatchOptions{Detach: true}
	lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
	go func() { lb.done <- te.e.Run(ctx, te.reg.Snapshot(), req, lb) }()
	select {
	case <-lb.started:
		return lb
	case err := <-lb.done:
		tb.Fatalf("the batch ended before a call started: %v", err)
	case <-time.After(10 * time.Second):
		tb.Fatal("no call started within 10s")
	}
	return nil
}

func TestCancelByID(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "hold", ""), call("b", "write", "")}}
	lb := startBatch(t, as("alice"), te, req)
	id := batchIDOf(t, lb.snapshot())

	for name, ctx := range map[string]context.Context{"another caller": as("bob"), "the anonymous caller": context.Background()} {
		if err := te.e.Cancel(ctx, id, "no"); CodeOf(err) != NotFound {
			t.Errorf("Cancel as %s: %v, want NotFound", name, err)
		}
	}
	if err := te.e.Cancel(as("alice"), "nope", ""); CodeOf(err) != NotFound {
		t.Errorf("Cancel of an unknown ID: %v, want NotFound", err)
	}
	if err := te.e.Cancel(as("alice"), id, "the user pressed stop"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	events, err := drain(lb)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	rs := results(t, events)
	for _, id := range []string{"a", "b"} {
		r := rs[id]
		if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "the user pressed stop") {
			t.Errorf("call %s: %v %q, want CANCELLED naming the reason", id, r.GetErrorKind(), text(r))
		}
	}
	if events[len(events)-1].GetFinished() == nil {
		t.Errorf("last event %v, want BatchFinished", events[len(events)-1])
	}
	if err := te.e.Cancel(as("alice"), id, ""); CodeOf(err) != NotFound {
		t.Errorf("Cancel of an ended batch: %v, want NotFound", err)
	}
}

func TestDetachedBatchOutlivesItsStream(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "hold", ""), call("b", "write", `{"ms":1}`)}}
	ctx, cancel := context.WithCancel(as("alice"))
	lb := startDetached(t, ctx, te, req)
	cancel() // the client goes away
	if _, err := drain(lb); CodeOf(err) != Canceled {
		t.Fatalf("Run after the client left: %v, want Canceled", err)
	}
	first := lb.snapshot()
	id := batchIDOf(t, first)
	if got := te.e.Stats().Batches; got != 1 {
		t.Fatalf("batches running after the stream ended: %d, want 1", got)
	}

	if err := te.e.Attach(as("bob"), id, 0, SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })); CodeOf(err) != NotFound {
		t.Errorf("Attach as another caller: %v, want NotFound", err)
	}
	if err := te.e.Attach(as("alice"), id, 99, SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })); CodeOf(err) != InvalidArgument {
		t.Errorf("Attach after a seq not yet sent: %v, want InvalidArgument", err)
	}

	// Two attachments: one from the start, one after all but the last
	// event the first stream saw; both live until the batch finishes.
	var wg sync.WaitGroup
	var all, rest recorder
	after := uint64(len(first) - 1)
	for _, a := range []struct {
		after uint64
		sink  *recorder
	}{{0, &all}, {after, &rest}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := te.e.Attach(as("alice"), id, a.after, a.sink); err != nil {
				t.Errorf("Attach after %d: %v", a.after, err)
			}
		}()
	}
	// Each has had an event, so both are attached before the batch can end.
	waitFor(t, func() bool { return len(all.get()) > 0 && len(rest.get()) > 0 })
	te.hold.releaseAll()
	wg.Wait()

	if len(all.events) < len(first) {
		t.Fatalf("an attachment from 0 got %d events, fewer than the first stream's %d", len(all.events), len(first))
	}
	for i, ev := range first {
		if all.events[i] != ev {
			t.Errorf("event %d: the first stream got %v, an attachment from 0 %v", i+1, ev, all.events[i])
		}
	}
	if got, want := len(rest.events), len(all.events)-int(after); got != want {
		t.Fatalf("an attachment after %d got %d events, want %d", after, got, want)
	}
	for i, ev := range rest.events {
		if ev != all.events[int(after)+i] {
			t.Errorf("event %d differs between the attachments", int(after)+i+1)
		}
	}
	rs := results(t, all.events)
	if text(rs["a"]) != "released" || rs["b"].GetIsError() {
		t.Errorf("results %v, want both calls to run to their end", rs)
	}
	if all.events[len(all.events)-1].GetFinished() == nil {
		t.Errorf("last event %v, want BatchFinished", all.events[len(all.events)-1])
	}
	waitFor(t, func() bool { return te.e.Stats().Batches == 0 })
	if err := te.e.Attach(as("alice"), id, 0, &all); CodeOf(err) != NotFound {
		t.Errorf("Attach to an ended batch: %v, want NotFound", err)
	}
}

func TestDetachedBatchCancelledByID(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "hold", "")}}
	ctx, cancel := context.WithCancel(as("alice"))
	lb := startDetached(t, ctx, te, req)
	cancel()
	_, _ = drain(lb)
	id := batchIDOf(t, lb.snapshot())
	done := make(chan error, 1)
	var rec recorder
	go func() { done <- te.e.Attach(as("alice"), id, 0, &rec) }()
	waitFor(t, func() bool { return len(rec.get()) > 0 })
	if err := te.e.Cancel(as("alice"), id, "stop"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if r := results(t, rec.events)["a"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED {
		t.Errorf("result %v, want CANCELLED", r)
	}
}

func TestAttachToABatchNotDetached(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	lb := startBatch(t, as("alice"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "hold", "")}})
	id := batchIDOf(t, lb.snapshot())
	var rec recorder
	if err := te.e.Attach(as("alice"), id, 0, &rec); CodeOf(err) != NotFound {
		t.Errorf("Attach: %v, want NotFound", err)
	}
	te.hold.releaseAll()
	if _, err := drain(lb); err != nil {
		t.Fatal(err)
	}
}

func TestEventsAreNumberedFromOne(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	for _, detach := range []bool{false, true} {
		req := &toolwirev1.ExecuteBatchRequest{
			Calls:   []*toolwirev1.ToolCall{call("a", "read", `{"ms":1}`), call("b", "ticker", `{"ms":60}`), call("c", "nope", "")},
			Options: &toolwirev1.BatchOptions{Detach: detach},
		}
		events := te.run(t, req)
		if len(events) < 8 {
			t.Fatalf("detach=%v: %d events, want at least 8", detach, len(events))
		}
		for i, ev := range events {
			if ev.GetSeq() != uint64(i+1) {
				t.Errorf("detach=%v: event %d (%T) has seq %d", detach, i+1, ev.GetEvent(), ev.GetSeq())
			}
		}
	}
}
