package engine

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// The tests of this file hold promises docs/retries.md makes that no other
// test held.

// TestReplayKeepsTheOriginalDuration: a replay says how long the call
// took when it ran, not how long the replay took.
func TestReplayKeepsTheOriginalDuration(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"))
	first := results(t, te.run(t, one(keyed("a", "bump", `{"n":1,"ms":20}`, "k"))))["a"]
	again := results(t, te.run(t, one(keyed("b", "bump", `{"n":1,"ms":20}`, "k"))))["b"]
	if !again.GetReplayed() {
		t.Fatalf("the resend was not replayed: %v", again)
	}
	if !proto.Equal(first.GetDuration(), again.GetDuration()) {
		t.Errorf("replay's duration %v, want the original's %v", again.GetDuration().AsDuration(), first.GetDuration().AsDuration())
	}
}

// TestSkippedAndCancelledKeyedCallsAreNotRecorded: a keyed call skipped
// (stop_on_error), one cancelled before it started and one cancelled as it
// ran leave their keys free: sent again, each runs.
func TestSkippedAndCancelledKeyedCallsAreNotRecorded(t *testing.T) {
	t.Parallel()
	c := newCounter()
	c.started = make(chan int, 10)
	te := newTestBed(t, Config{}, c.tool("bump"))

	skipped := results(t, te.run(t, &toolwirev1.ExecuteBatchRequest{
		Options: &toolwirev1.BatchOptions{StopOnError: true},
		Calls: []*toolwirev1.ToolCall{
			call("fail", "bump", `{"n":-1}`),
			keyed("s", "bump", `{"n":1}`, "skipped"),
		},
	}))["s"]
	<-c.started
	if skipped.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_SKIPPED {
		t.Fatalf("the call after a failure: %v, want SKIPPED", skipped.GetErrorKind())
	}

	// Two lanes (bump is not read-only): the second waits for the first,
	// which waits for the gate; the client cancels.
	ctx, cancel := context.WithCancel(context.Background())
	lb := startBatch(t, ctx, te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		keyed("r", "bump", `{"n":2,"wait":true}`, "running"),
		keyed("w", "bump", `{"n":3}`, "waiting"),
	}})
	<-c.started
	cancel()
	events, _ := drain(lb)
	got := results(t, events)
	if got["r"].GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || got["w"].GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED {
		t.Fatalf("cancelled batch: r %v, w %v; want both CANCELLED", got["r"].GetErrorKind(), got["w"].GetErrorKind())
	}

	close(c.gate)
	again := results(t, te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		keyed("s", "bump", `{"n":1}`, "skipped"),
		keyed("r", "bump", `{"n":2,"wait":true}`, "running"),
		keyed("w", "bump", `{"n":3}`, "waiting"),
	}}))
	for id, n := range map[string]int{"s": 1, "r": 2, "w": 3} {
		if r := again[id]; r.GetIsError() || r.GetReplayed() {
			t.Errorf("call %s sent again: %v; want it run", id, r)
		}
		want := 1
		if id == "r" {
			want = 2 // it ran before it was cancelled
		}
		if runs := c.count(n); runs != want {
			t.Errorf("call %s ran %d times, want %d", id, runs, want)
		}
	}
}

// orderLog is a sink and an idempotency store that write what happens to
// one list, so a test can read their order.
type orderLog struct {
	store.Idempotency
	mu      sync.Mutex
	entries []string
	sizes   []int
}

func (o *orderLog) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries = append(o.entries, s)
}

func (o *orderLog) Complete(ctx context.Context, key, owner string, result []byte, ttl time.Duration) error {
	// A slow write: a result sent before its record would reach the
	// sink meanwhile. (The test passes however long it takes.)
	time.Sleep(50 * time.Millisecond)
	err := o.Idempotency.Complete(ctx, key, owner, result, ttl)
	o.mu.Lock()
	o.sizes = append(o.sizes, len(result))
	o.mu.Unlock()
	o.add("recorded")
	return err
}

func (o *orderLog) Send(ev *toolwirev1.ExecuteBatchResponse) error {
	if ev.GetResult() != nil {
		o.add("sent")
	}
	return nil
}

// TestResultIsRecordedBeforeItIsSent: the store has the record before the
// result event reaches the stream, so a client that saw a result gets
// the same one on a retry.
func TestResultIsRecordedBeforeItIsSent(t *testing.T) {
	t.Parallel()
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	log := &orderLog{Idempotency: st}
	c := newCounter()
	te := newTestBedWith(t, Config{}, Deps{Idempotency: log, Vars: st}, c.tool("bump"))
	if err := te.e.Run(context.Background(), te.reg.Snapshot(), one(keyed("a", "bump", `{"n":1}`, "k")), log); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log.entries, ","); got != "recorded,sent" {
		t.Errorf("order %q, want recorded,sent", got)
	}
}

// TestRecordIsBoundedLikeTheResult: what the store keeps of a keyed call
// is the result its caller got, held to max_result_bytes, not the tool's
// whole output.
func TestRecordIsBoundedLikeTheResult(t *testing.T) {
	t.Parallel()
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	log := &orderLog{Idempotency: st}
	big := tools.Tool{
		Name:        "huge",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return tools.Text(strings.Repeat("x", 1<<20)), nil
		},
	}
	const limit = 4 << 10
	te := newTestBedWith(t, Config{MaxResultBytes: limit}, Deps{Idempotency: log, Vars: st}, big)
	first := results(t, te.run(t, one(keyed("a", "huge", `{}`, "k"))))["a"]
	again := results(t, te.run(t, one(keyed("b", "huge", `{}`, "k"))))["b"]
	if !first.GetTruncated() || !again.GetReplayed() {
		t.Fatalf("first truncated=%v, resend replayed=%v; want a truncated result replayed", first.GetTruncated(), again.GetReplayed())
	}
	sameOutcome(t, first, again)
	if len(log.sizes) != 1 || log.sizes[0] > 2*limit {
		t.Errorf("records written: %d bytes each (%d); want one within about %d bytes (max_result_bytes)", log.sizes, len(log.sizes), limit)
	}
}

// TestKeyedCallOnAFrozenStoreRunsNothing: a real redis-server, frozen
// (SIGSTOP: connections open, nothing answered). A keyed call is not run
// without its claim: after trying for a while it gets INTERNAL saying the
// store failed. A call without a key does not touch the store and runs; a
// detached batch, whose log the store must open, is refused UNAVAILABLE,
// before its call runs or, its calls being read-only, after.
func TestKeyedCallOnAFrozenStoreRunsNothing(t *testing.T) {
	srv := testenv.StartRedis(t)
	st := openRedis(t, srv)
	c := newCounter()
	te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st, EventLog: st}, c.tool("bump"))
	srv.Freeze()
	defer srv.Thaw()
	r := results(t, te.run(t, one(keyed("a", "bump", `{"n":1}`, "k"))))["a"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INTERNAL || !strings.Contains(text(r), "store failed") || c.count(1) != 0 {
		t.Fatalf("keyed call on a frozen store: %v %q, runs %d; want INTERNAL saying the store failed, nothing run", r.GetErrorKind(), text(r), c.count(1))
	}
	if r := results(t, te.run(t, one(call("b", "bump", `{"n":2}`))))["b"]; r.GetIsError() || c.count(2) != 1 {
		t.Fatalf("a call without a key on a frozen store: %v %q; want it run", r.GetErrorKind(), text(r))
	}
	// A detached batch needs its log opened: refused, nothing run.
	detached := one(call("d", "bump", `{"n":3}`))
	detached.Options = &toolwirev1.BatchOptions{Detach: true}
	if _, err := te.runErr(as("alice"), detached); CodeOf(err) != Unavailable || c.count(3) != 0 {
		t.Fatalf("a detached batch on a frozen store: %v, runs %d; want Unavailable, nothing run", err, c.count(3))
	}
	// One of read-only calls runs while its log waits (deferOpen), then
	// is refused the same way when the write that opens the log gets no
	// answer: no event reaches its client.
	readOnly := one(call("e", "echo", `{"text":"hi"}`))
	readOnly.Options = &toolwirev1.BatchOptions{Detach: true}
	if events, err := te.runErr(as("alice"), readOnly); CodeOf(err) != Unavailable || len(events) != 0 {
		t.Fatalf("a detached batch of a read-only call on a frozen store: %d events, %v; want none, Unavailable", len(events), err)
	}
}

// TestSharedRateOnARealRedis: with a Redis store, replicas take from one
// allowance per caller; while Redis is frozen (SIGSTOP) a batch is let
// through rather than refused or held (docs/limits.md, Rate limits).
func TestSharedRateOnARealRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	replica := func() *testBed {
		st := openRedis(t, srv)
		return newTestBedWith(t, Config{RatePerCaller: 0.01, RateBurst: 1}, Deps{Idempotency: st, Vars: st, RateStore: st})
	}
	a, b := replica(), replica()
	req := calls(call("a", "echo", `{"text":"x"}`))
	if _, err := a.runErr(as("alice"), req); err != nil {
		t.Fatalf("alice's first batch on A: %v", err)
	}
	if _, err := b.runErr(as("alice"), req); CodeOf(err) != ResourceExhausted {
		t.Fatalf("alice's second batch, on B: %v; want ResourceExhausted (one allowance for both)", err)
	}
	srv.Freeze()
	defer srv.Thaw()
	events, err := b.runErr(as("alice"), req)
	if err != nil || results(t, events)["a"].GetIsError() {
		t.Fatalf("a batch while Redis is frozen: %v; want it let through", err)
	}
}

// TestMaxResultBytesIsLoweredToFitAMessage: max_result_bytes set above
// max_message_bytes is lowered to leave room for a result's framing, IDs
// and marker: 64 KiB, or half the message when it is smaller than 128 KiB
// (docs/limits.md).
func TestMaxResultBytesIsLoweredToFitAMessage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ msg, result, want int }{
		{4 << 20, 0, 256 << 10},
		{1 << 20, 4 << 20, 1<<20 - 64<<10},
		{100 << 10, 1 << 20, 50 << 10},
		{4 << 20, 8 << 10, 8 << 10},
	} {
		te := newTestBed(t, Config{MaxMessageBytes: tt.msg, MaxResultBytes: tt.result})
		if got := te.e.Config().MaxResultBytes; got != tt.want {
			t.Errorf("max_message_bytes %d, max_result_bytes %d: got %d, want %d", tt.msg, tt.result, got, tt.want)
		}
	}
}

// waitHook is an idempotency store that says when a duplicate starts
// waiting for a call in flight.
type waitHook struct {
	store.Idempotency
	waiting chan struct{}
	once    sync.Once
}

func (w *waitHook) Wait(ctx context.Context, key string) error {
	w.once.Do(func() { close(w.waiting) })
	return w.Idempotency.Wait(ctx, key)
}

// TestDuplicateOnAnotherReplicaJoinsTheRunningCall: two replicas on a real
// redis-server. A keyed call runs on A; its duplicate sent to B waits for
// it (a Redis waiter polls) and gets its result as a replay; the tool runs
// once.
func TestDuplicateOnAnotherReplicaJoinsTheRunningCall(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newCounter()
	c.started = make(chan int, 4)
	sa := openRedis(t, srv)
	hb := &waitHook{Idempotency: openRedis(t, srv), waiting: make(chan struct{})}
	a := newTestBedWith(t, Config{}, Deps{Idempotency: sa, Vars: sa}, c.tool("bump"))
	b := newTestBedWith(t, Config{}, Deps{Idempotency: hb, Vars: sa}, c.tool("bump"))
	req := one(keyed("x", "bump", `{"n":1,"wait":true}`, "k"))
	onA := make(chan *toolwirev1.CallResult, 1)
	go func() {
		events, _ := a.runErr(context.Background(), req)
		onA <- results(t, events)["x"]
	}()
	<-c.started
	onB := make(chan *toolwirev1.CallResult, 1)
	go func() {
		events, _ := b.runErr(context.Background(), req)
		onB <- results(t, events)["x"]
	}()
	select {
	case <-hb.waiting:
	case r := <-onB:
		t.Fatalf("the duplicate on B ended while the call ran on A: %v", r)
	case <-c.started:
		close(c.gate)
		t.Fatal("the duplicate ran on B while the call ran on A")
	}
	close(c.gate)
	first, second := <-onA, <-onB
	if first.GetIsError() || !second.GetReplayed() || c.count(1) != 1 {
		t.Fatalf("on A %v; on B %v; runs %d: want B to join A's call, run once", first, second, c.count(1))
	}
	sameOutcome(t, first, second)
}

// TestRecordsAreReplayedForTheirTTL: a record is replayed while
// idempotency_ttl lasts; a resend after it runs the call again.
func TestRecordsAreReplayedForTheirTTL(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{IdempotencyTTL: time.Second}, c.tool("bump"))
	send := func(id string) *toolwirev1.CallResult {
		return results(t, te.run(t, one(keyed(id, "bump", `{"n":1}`, "k"))))[id]
	}
	start := time.Now()
	send("a")
	if r := send("b"); !r.GetReplayed() && time.Since(start) < time.Second {
		t.Fatalf("a resend within the TTL: %v; want it replayed", r)
	}
	waitFor(t, func() bool { return !send("c").GetReplayed() })
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Errorf("a resend ran again %v after the first, within the 1s TTL", elapsed)
	}
	if n := c.count(1); n != 2 {
		t.Errorf("the tool ran %d times, want 2", n)
	}
}

// TestLongBatchIDsAreRefusedBeforeTheStore: a batch_id (or call_id) longer
// than any batch has is InvalidArgument in every operation that names a
// batch, before the store is asked (docs/limits.md, Inputs): here the
// store is closed, so asking it would answer otherwise.
func TestLongBatchIDsAreRefusedBeforeTheStore(t *testing.T) {
	t.Parallel()
	st := memory.New(memory.Options{})
	st.Close()
	te := newTestBedWith(t, Config{}, Deps{EventLog: st, Idempotency: st, Vars: st})
	long := strings.Repeat("b", MaxIDBytes+1)
	nop := SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })
	for name, op := range map[string]func() error{
		"AttachBatch": func() error { return te.e.Attach(as("alice"), long, 0, nop) },
		"GetBatch": func() error {
			_, err := te.e.GetBatch(as("alice"), long)
			return err
		},
		"CancelBatch":                  func() error { return te.e.Cancel(as("alice"), long, "") },
		"ResolveApproval":              func() error { return te.e.ResolveApproval(context.Background(), long, "c", true, "", "") },
		"ResolveApproval, its call_id": func() error { return te.e.ResolveApproval(context.Background(), "b", long, true, "", "") },
	} {
		if err := op(); CodeOf(err) != InvalidArgument || !strings.Contains(err.Error(), "the limit is 256") {
			t.Errorf("%s of a %d-byte ID: %v; want InvalidArgument naming the limit", name, len(long), err)
		}
	}
}

// TestCancelThroughAnotherReplicaWhileTheStoreIsOut: a cancel sent
// through a replica other than the batch's is written to the store first,
// so it fails UNAVAILABLE while a real Redis is frozen, never answered OK
// and lost; sent again once the store answers, it cancels the batch.
func TestCancelThroughAnotherReplicaWhileTheStoreIsOut(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newCounter()
	c.started = make(chan int, 4)
	replica := func() *testBed {
		st := openRedis(t, srv)
		return newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st, EventLog: st}, c.tool("bump"))
	}
	a, b := replica(), replica()
	ctx, cancel := context.WithCancel(as("alice"))
	defer cancel()
	lb := startDetached(t, ctx, a, one(call("h", "bump", `{"n":1,"wait":true}`)))
	<-c.started
	id := batchIDOf(t, lb.snapshot())
	srv.Freeze()
	err := b.e.Cancel(as("alice"), id, "stop")
	srv.Thaw()
	if CodeOf(err) != Unavailable {
		t.Fatalf("a cancel through B while the store is frozen: %v; want Unavailable", err)
	}
	waitFor(t, func() bool { return b.e.Cancel(as("alice"), id, "stop") == nil })
	events, _ := drain(lb)
	if r := results(t, events)["h"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "stop") {
		t.Errorf("the call's result %v; want CANCELLED, saying why", r)
	}
}
