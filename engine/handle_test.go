package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine/internal/coalesce"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
	"google.golang.org/protobuf/proto"
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
	case <-testDeadline(tb):
		tb.Fatal("no call started by the test's deadline")
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
		if !proto.Equal(all.events[i], ev) {
			t.Errorf("event %d: the first stream got %v, an attachment from 0 %v", i+1, ev, all.events[i])
		}
	}
	if got, want := len(rest.events), len(all.events)-int(after); got != want {
		t.Fatalf("an attachment after %d got %d events, want %d", after, got, want)
	}
	for i, ev := range rest.events {
		if !proto.Equal(ev, all.events[int(after)+i]) {
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
	// Ended, it is replayed whole while its log is kept.
	var again recorder
	if err := te.e.Attach(as("alice"), id, 0, &again); err != nil {
		t.Fatalf("Attach to an ended batch: %v", err)
	}
	if len(again.events) != len(all.events) {
		t.Fatalf("Attach to the ended batch replayed %d events, want %d", len(again.events), len(all.events))
	}
	for i := range again.events {
		if !proto.Equal(again.events[i], all.events[i]) {
			t.Errorf("replayed event %d differs", i+1)
		}
	}
	got, err := te.e.GetBatch(as("alice"), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_FINISHED || len(got.GetResults()) != 2 || got.GetLastSeq() != uint64(len(all.events)) || got.GetFinished() == nil {
		t.Errorf("GetBatch = %v, want FINISHED with 2 results, last_seq %d", got, len(all.events))
	}
	if _, err := te.e.GetBatch(as("bob"), id); CodeOf(err) != NotFound {
		t.Errorf("GetBatch as another caller: %v, want NotFound", err)
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

// dyingLog is an EventLog whose replica can die: after kill, nothing it
// writes reaches the store, as if its process had gone.
type dyingLog struct {
	store.EventLog
	dead atomic.Bool
}

var errDead = errors.New("this replica is dead")

func (d *dyingLog) Append(ctx context.Context, name, owner string, data ...[]byte) (uint64, error) {
	if d.dead.Load() {
		return 0, errDead
	}
	return d.EventLog.Append(ctx, name, owner, data...)
}

func (d *dyingLog) RenewLog(ctx context.Context, name, owner string, lease time.Duration) error {
	if d.dead.Load() {
		return errDead
	}
	return d.EventLog.RenewLog(ctx, name, owner, lease)
}

func (d *dyingLog) Finish(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	if d.dead.Load() {
		return errDead
	}
	return d.EventLog.Finish(ctx, name, owner, ttl, data...)
}

// twoReplicas returns two engines sharing one in-memory store, the first's
// event log able to die.
func twoReplicas(t *testing.T, cfg Config) (a, b *testBed, dying *dyingLog) {
	m := memory.New(memory.Options{})
	dying = &dyingLog{EventLog: m}
	da := Deps{Idempotency: m, Vars: m, EventLog: dying, Replica: "a"}
	db := Deps{Idempotency: m, Vars: m, EventLog: m, Replica: "b"}
	return newTestBedWith(t, cfg, da), newTestBedWith(t, cfg, db), dying
}

func TestAttachAndCancelFromAnotherReplica(t *testing.T) {
	t.Parallel()
	a, b, _ := twoReplicas(t, Config{})
	ctx, cancel := context.WithCancel(as("alice"))
	lb := startDetached(t, ctx, a, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
	cancel()
	_, _ = drain(lb)
	id := batchIDOf(t, lb.snapshot())

	if err := b.e.Cancel(as("bob"), id, "no"); CodeOf(err) != NotFound {
		t.Errorf("Cancel on the other replica as another caller: %v, want NotFound", err)
	}
	var rec recorder
	done := make(chan error, 1)
	go func() { done <- b.e.Attach(as("alice"), id, 0, &rec) }()
	waitFor(t, func() bool { return len(rec.get()) >= 2 }) // BatchAccepted, CallStarted: live from A
	if err := b.e.Cancel(as("alice"), id, "stop it"); err != nil {
		t.Fatalf("Cancel on the other replica: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Attach on the other replica: %v", err)
	}
	r := results(t, rec.events)["h"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "stop it") {
		t.Errorf("result %v, want CANCELLED naming the reason", r)
	}
	got, err := b.e.GetBatch(as("alice"), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_CANCELLED {
		t.Errorf("GetBatch state %v, want CANCELLED", got.GetState())
	}
}

func TestLostReplicasBatchEndsOwnerLost(t *testing.T) {
	t.Parallel()
	a, b, dying := twoReplicas(t, Config{BatchLease: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(as("alice"))
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("e", "echo", `{"text":"done"}`), call("h", "hold", "")}}
	lb := startDetached(t, ctx, a, req)
	id := batchIDOf(t, lb.snapshot())
	waitFor(t, func() bool { return results(t, lb.snapshot())["e"] != nil })
	cancel()
	_, _ = drain(lb)
	dying.dead.Store(true) // replica A dies: nothing more of it reaches the store

	got, err := b.e.GetBatch(as("alice"), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_RUNNING {
		t.Fatalf("GetBatch while A's lease lasts: %v, want RUNNING", got.GetState())
	}
	var rec recorder
	if err := b.e.Attach(as("alice"), id, 0, &rec); err != nil { // returns once the lease has run out and B ended it
		t.Fatalf("Attach: %v", err)
	}
	rs := results(t, rec.events)
	if text(rs["e"]) != "done" {
		t.Errorf("the finished call's result %v, want it as A recorded it", rs["e"])
	}
	if r := rs["h"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "owner lost") || r.GetIndex() != 1 {
		t.Errorf("the open call's result %v, want CANCELLED, owner lost, index 1", r)
	}
	for i, ev := range rec.events {
		if ev.GetSeq() != uint64(i+1) {
			t.Errorf("event %d has seq %d", i+1, ev.GetSeq())
		}
	}
	f := rec.events[len(rec.events)-1].GetFinished()
	if f == nil || f.GetSucceeded() != 1 || f.GetCancelled() != 1 {
		t.Errorf("last event %v, want BatchFinished: 1 succeeded, 1 cancelled", rec.events[len(rec.events)-1])
	}
	// It ran at least until its lease ran out: its duration says so.
	if d := f.GetDuration().AsDuration(); d < 300*time.Millisecond {
		t.Errorf("BatchFinished of the batch ended by takeover says it lasted %v; it lasted at least its lease, 300ms", d)
	}
	got, err = b.e.GetBatch(as("alice"), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_CANCELLED || len(got.GetResults()) != 2 {
		t.Errorf("GetBatch after: %v, want CANCELLED with 2 results", got)
	}
}

// TestChattyToolsLogIsBounded: 25,000 progress reports of a detached
// batch's call (more than twice the bound) leave at most the stated bound
// of events in its log. The call's timeout is the longest there is: the
// reports take seconds under the race detector, and on a loaded machine
// the default minute ended the call before its last report.
func TestChattyToolsLogIsBounded(t *testing.T) {
	t.Parallel()
	const reports = 25_000
	m := memory.New(memory.Options{})
	te := newTestBedWith(t, Config{DefaultCallTimeout: 10 * time.Minute}, Deps{EventLog: m})
	var rec recorder
	req := &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{call("c", "chatty", fmt.Sprintf(`{"n":%d,"size":8}`, reports))},
		Options: &toolwirev1.BatchOptions{Detach: true},
	}
	if err := te.e.Run(as("alice"), te.reg.Snapshot(), req, &rec); err != nil {
		t.Fatal(err)
	}
	if got := te.state.reports.Load(); got != reports {
		t.Fatalf("the tool reported %d times, want %d", got, reports)
	}
	info, err := m.Stat(context.Background(), logName("alice", batchIDOf(t, rec.events)))
	if err != nil {
		t.Fatal(err)
	}
	bound := uint64(2 + 4*1 + coalesce.MaxStored)
	if info.Last > bound || uint64(len(rec.events)) != info.Last {
		t.Fatalf("the log holds %d events (the stream got %d); the bound is %d", info.Last, len(rec.events), bound)
	}
	var output int
	for _, ev := range rec.events {
		output += len(ev.GetProgress().GetOutput())
	}
	if output == 0 || text(results(t, rec.events)["c"]) != "reported" {
		t.Errorf("output %d bytes, result %v: want progress and the result", output, results(t, rec.events)["c"])
	}
}

// TestFinishedLogsExpire: 10,000 detached batches, finished and past
// BatchTTL, leave no log in the store. (waitFor allows 10s.)
func TestFinishedLogsExpire(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	te := newTestBedWith(t, Config{BatchTTL: 3 * time.Second}, Deps{EventLog: m})
	const n = 10_000
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("e", "echo", `{"text":"x"}`)}, Options: &toolwirev1.BatchOptions{Detach: true}}
				if err := te.e.Run(context.Background(), te.reg.Snapshot(), req, SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d batches failed", failed.Load())
	}
	if got := m.Logs(); got == 0 || got > n {
		t.Fatalf("the store holds %d logs right after, want some (the first may have expired), at most %d", got, n)
	}
	waitFor(t, func() bool {
		_, _ = m.Stat(context.Background(), "any") // a read sweeps expired logs, at most once a second
		return m.Logs() == 0
	})
}

// TestDrainFinishesDetachedBatches: a server's drain lets a detached batch
// run for DrainTimeout, then cancels its calls; their results and
// BatchFinished are in the log, which is finished, not left running.
func TestDrainFinishesDetachedBatches(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	te := newTestBedWith(t, Config{DrainTimeout: 50 * time.Millisecond}, Deps{EventLog: m})
	ctx, cancel := context.WithCancel(as("alice"))
	lb := startDetached(t, ctx, te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
	cancel()
	_, _ = drain(lb)
	id := batchIDOf(t, lb.snapshot())
	te.e.Drain()
	info, err := m.Stat(context.Background(), logName("alice", id))
	if err != nil || !info.Finished {
		t.Fatalf("the log after Drain: %+v %v, want finished", info, err)
	}
	got, err := te.e.GetBatch(as("alice"), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_CANCELLED || len(got.GetResults()) != 1 || !strings.Contains(text(got.GetResults()[0]), "shutting down") {
		t.Errorf("GetBatch after Drain: %v, want CANCELLED, the call cancelled for the shutdown", got)
	}
}

// TestCancelAfterBatchFinished: a client that read BatchFinished and then
// cancels is told NotFound, as a moment later, though the engine may not
// have forgotten the batch yet (toolwire cancel after toolwire attach
// answered OK, now and then, on a loaded machine).
func TestCancelAfterBatchFinished(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	var cancelErr error
	var id string
	sink := SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
		if a := ev.GetAccepted(); a != nil {
			id = a.GetBatchId()
		}
		if ev.GetFinished() != nil {
			// Before Send returns, Run has not returned either: the
			// batch is still the engine's.
			cancelErr = te.e.Cancel(as("alice"), id, "too late")
		}
		return nil
	})
	if err := te.e.Run(as("alice"), te.reg.Snapshot(), calls(call("a", "echo", `{"text":"x"}`)), sink); err != nil {
		t.Fatal(err)
	}
	if CodeOf(cancelErr) != NotFound {
		t.Errorf("Cancel once BatchFinished was sent: %v; want NotFound", cancelErr)
	}
}
