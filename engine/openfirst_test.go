package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/tools"
)

// The tests of a detached batch whose log is opened with its first events
// (deferOpen): a batch of read-only calls runs while its log waits, and a
// quick one is stored in one write.

// finishingLog is a recordingLog that writes whole logs too, as the stores
// do (store.LogOpenFinisher), so the engine may defer opening a log; a
// bare recordingLog keeps every log opened before its calls run.
type finishingLog struct{ *recordingLog }

func (f finishingLog) OpenFinished(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	return f.write("openFinished", data, func() error {
		return f.EventLog.(store.LogOpenFinisher).OpenFinished(ctx, name, owner, ttl, data...)
	})
}

// deferringBed is a testBed on a memory store behind a finishingLog, with
// extra tools.
func deferringBed(t *testing.T, extra ...tools.Tool) (*memory.Store, finishingLog, *testBed) {
	m := memory.New(memory.Options{})
	rl := finishingLog{newRecordingLog(m)}
	return m, rl, newTestBedWith(t, Config{}, Deps{Idempotency: m, Vars: m, EventLog: rl}, extra...)
}

func opsOf(writes []logWrite) []string {
	var ops []string
	for _, w := range writes {
		ops = append(ops, w.op)
	}
	return ops
}

// TestQuickBatchIsOneWrite: a detached batch of read-only calls that end
// at once is stored in one write, BatchAccepted to BatchFinished, and its
// stream gets the same events as before; a batch with a call that is not
// read-only opens its log with BatchAccepted alone before that call runs.
func TestQuickBatchIsOneWrite(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	sideEffect := tools.Tool{Name: "side_effect", Description: "not read-only", Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
		entered <- struct{}{}
		return tools.Text("done"), nil
	}}
	m, rl, te := deferringBed(t, sideEffect)
	opened := make(chan struct{})
	openGo := make(chan struct{})
	rl.fail = func(op string, n int) (error, error) {
		if op == "open" && n == 1 {
			close(opened)
			<-openGo
		}
		return nil, nil
	}
	te.e.openWindow = time.Hour // the read-only batch ends first, however slow the machine

	// Not read-only: the log is opened first, the call held until it is.
	lb := startLive(as("alice"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("r", "read", ""), call("s", "side_effect", "")}})
	<-opened
	select {
	case <-entered:
		t.Fatal("a call that is not read-only ran before its batch's log was opened")
	case <-time.After(20 * time.Millisecond):
	}
	close(openGo)
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, m, "alice", events)
	if w := rl.recorded(); w[0].op != "open" || !slices.Equal(w[0].seqs, []uint64{1}) {
		t.Fatalf("writes %+v: want the Open of BatchAccepted alone first", w)
	}

	// Read-only: one write.
	before := len(rl.recorded())
	events = te.runAs(t, "bob", &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{call("a", "read", ""), call("b", "read", ""), call("c", "echo", `{"text":"hi"}`), call("d", "no_such_tool", "")},
		Options: &toolwirev1.BatchOptions{Detach: true}})
	checkStream(t, m, "bob", events)
	w := rl.recorded()[before:]
	if len(w) != 1 || w[0].op != "openFinished" || len(w[0].seqs) != len(events) {
		t.Fatalf("writes %+v for %d events: want one OpenFinished of them all", w, len(events))
	}
	if r := results(t, events); r["c"].GetIsError() || !r["d"].GetIsError() {
		t.Fatalf("results %v", r)
	}
}

// TestDeferredOpenAfterTheWindow: a read-only call that runs on past
// openWindow has its batch's log opened meanwhile, with what was queued,
// so that the stream (and any replica) gets the batch's events while it
// runs; the rest goes in the Finish.
func TestDeferredOpenAfterTheWindow(t *testing.T) {
	t.Parallel()
	m, rl, te := deferringBed(t)
	lb := startLive(as("alice"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
	<-te.hold.started
	waitFor(t, func() bool { return len(lb.snapshot()) == 2 }) // BatchAccepted, CallStarted
	if info, err := m.Stat(context.Background(), logName("alice", batchIDOf(t, lb.snapshot()))); err != nil || !info.Owned || info.Last != 2 {
		t.Fatalf("the log of a batch still running past the window: %+v, %v; want it open, owned, with 2 events", info, err)
	}
	te.hold.releaseAll()
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, m, "alice", events)
	// The Open carried CallStarted too unless the window passed before
	// the call began; either way the result went in the Finish.
	if ops := opsOf(rl.recorded()); ops[0] != "open" || ops[len(ops)-1] != "finish" || len(ops) > 3 {
		t.Fatalf("writes %v, want an Open, perhaps an Append, then the Finish", ops)
	}
}

// TestDeferredOpenWithNothingQueued: a batch whose call waits before it
// starts, emitting nothing (here, for a duplicate of its idempotency key
// running elsewhere), still has its log opened once the window passes,
// with BatchAccepted alone, and its stream gets BatchAccepted then.
func TestDeferredOpenWithNothingQueued(t *testing.T) {
	t.Parallel()
	m, rl, te := deferringBed(t)
	keyed := func() *toolwirev1.ToolCall {
		c := call("h", "hold", "")
		c.IdempotencyKey = "k"
		return c
	}
	first := startBatch(t, as("alice"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{keyed()}})
	second := startLive(as("alice"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{keyed()}})
	waitFor(t, func() bool { return len(second.snapshot()) == 1 })
	if ev := second.snapshot()[0]; ev.GetAccepted() == nil {
		t.Fatalf("the first event %v, want BatchAccepted", ev)
	}
	w := rl.recorded()
	if len(w) != 1 || w[0].op != "open" || !slices.Equal(w[0].seqs, []uint64{1}) {
		t.Fatalf("writes %+v, want the Open of BatchAccepted alone", w)
	}
	te.hold.releaseAll()
	if _, err := drain(first); err != nil {
		t.Fatal(err)
	}
	events, err := drain(second)
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, m, "alice", events)
}

// TestDeferredOpenRefused: a store that does not take the write opening a
// deferred log refuses the batch as the Open before its calls did
// (Unavailable, no event), whether the batch had ended (OpenFinished) or
// was still running (Open, its calls then cancelled); nothing is left
// running, buffered or in the store.
func TestDeferredOpenRefused(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"openFinished", "open"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			_, rl, te := deferringBed(t)
			rl.fail = func(o string, _ int) (error, error) {
				if o == op {
					return errors.New("the store is down"), nil
				}
				return nil, nil
			}
			name := "read"
			if op == "open" {
				name = "hold" // still running when the window passes
			} else {
				te.e.openWindow = time.Hour // the batch ends first, however slow the machine
			}
			events, err := te.runErr(as("alice"), &toolwirev1.ExecuteBatchRequest{
				Calls: []*toolwirev1.ToolCall{call("a", name, "")}, Options: &toolwirev1.BatchOptions{Detach: true}})
			var e *Error
			if !errors.As(err, &e) || e.Code != Unavailable || len(events) != 0 {
				t.Fatalf("Run = %d events, %v; want none and Unavailable", len(events), err)
			}
			waitFor(t, func() bool { return te.e.Stats().Batches == 0 && te.e.Stats().CallsRunning == 0 })
			if n := te.e.unstored.Load(); n != 0 {
				t.Fatalf("%d bytes of events still held for the store", n)
			}
			if w := rl.recorded(); len(w) != 1 || w[0].op != op {
				t.Fatalf("writes %+v, want the one refused %s", w, op)
			}
		})
	}
}
