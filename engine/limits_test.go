package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestPerCallerDefaultShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		perCaller int
		caller    string
		wantCap   int // 0: none
	}{
		{"authenticated caller gets a quarter", 0, "alice", 2},
		{"anonymous caller is not capped by default", 0, "", 0},
		{"a set cap applies to the anonymous caller", 3, "", 3},
		{"negative turns the cap off", -1, "alice", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := New(Config{MaxConcurrentCalls: 8, MaxCallsPerCaller: tt.perCaller}, Deps{})
			defer srv.Close()
			taken := 0
			for ; taken < 8; taken++ {
				if _, err := srv.limits.Acquire(context.Background(), tt.caller, 0); err != nil {
					break
				}
			}
			want := tt.wantCap
			if want == 0 {
				want = 8
			}
			if taken != want {
				t.Errorf("caller %q took %d slots, want %d", tt.caller, taken, want)
			}
			if tt.wantCap != 0 {
				if _, err := srv.limits.Acquire(context.Background(), "bob", 0); err != nil {
					t.Errorf("another caller is locked out: %v", err)
				}
			}
		})
	}
}

func TestBatchBeyondTheCallCapQueuesThenRuns(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{MaxConcurrentCalls: 1, MaxQueueWait: time.Hour})
	first := startBatch(t, context.Background(), te, calls(call("a", "hold", "")))

	second := make(chan error, 1)
	var secondEvents []*toolwirev1.ExecuteBatchResponse
	go func() {
		var err error
		secondEvents, err = te.runErr(context.Background(), calls(call("b", "echo", `{"text":"queued"}`)))
		second <- err
	}()
	waitFor(t, func() bool { return te.e.Stats().SlotWaiters == 1 })
	select {
	case err := <-second:
		t.Fatalf("second batch ended while the only slot was taken: %v", err)
	default:
	}

	te.hold.releaseAll()
	if _, err := drain(first); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("queued batch: %v", err)
	}
	if r := results(t, secondEvents)["b"]; r.GetIsError() || text(r) != "queued" {
		t.Errorf("queued call's result = %v, want echo's text", r)
	}
}

func TestBatchBeyondTheCallCapIsRefusedAfterMaxQueueWait(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{MaxConcurrentCalls: 1, MaxQueueWait: 10 * time.Millisecond})
	first := startBatch(t, context.Background(), te, calls(call("a", "hold", "")))

	_, err := te.runErr(context.Background(), calls(call("b", "echo", `{}`)))
	if CodeOf(err) != ResourceExhausted || !strings.Contains(err.Error(), "limit of 1 concurrent calls") {
		t.Errorf("batch beyond the cap: err = %v, want ResourceExhausted naming the limit", err)
	}

	te.hold.releaseAll()
	events, err := drain(first)
	if err != nil || results(t, events)["a"].GetIsError() {
		t.Errorf("the running batch was disturbed: %v %v", err, events)
	}
}

func TestCallOfAnAcceptedBatchWaitingTooLongForASlotTimesOutUnrun(t *testing.T) {
	t.Parallel()
	// One slot, two calls in one parallel lane: whichever runs first holds
	// the slot past its timeout (its tool ignores cancellation and the
	// abandon grace is long), so the other's wait for a slot times out.
	te := newTestBed(t, Config{AbandonGrace: time.Hour, MaxConcurrentCalls: 1})
	timeout := durationpb.New(20 * time.Millisecond)
	req := calls(
		&toolwirev1.ToolCall{CallId: "x", Name: "hold_stubborn", Timeout: timeout},
		&toolwirev1.ToolCall{CallId: "y", Name: "hold_stubborn", Timeout: timeout})
	// The first result goes to the test, the events after it to rest (Run
	// sends from one goroutine).
	first := make(chan *toolwirev1.CallResult, 1)
	var rest []*toolwirev1.ExecuteBatchResponse
	sawResult := false
	sink := SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
		if r := ev.GetResult(); r != nil && !sawResult {
			sawResult = true
			first <- r
			return nil
		}
		if sawResult {
			rest = append(rest, ev)
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- te.e.Run(context.Background(), te.reg.Snapshot(), req, sink) }()
	var waited *toolwirev1.CallResult
	select {
	case waited = <-first:
	case err := <-done:
		t.Fatalf("the batch ended before a result: %v", err)
	}
	ran := <-te.hold.started
	if waited.GetCallId() == ran {
		t.Fatalf("the first result is of the running call %q", ran)
	}
	if waited.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(text(waited), "waiting") || !strings.Contains(text(waited), "Nothing was run") {
		t.Errorf("waiting call's result = %v, want TIMEOUT saying it waited for a slot and did not run", waited)
	}
	te.hold.releaseAll()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := results(t, rest)[ran]; r == nil || r.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT && strings.Contains(text(r), "waiting") {
		t.Errorf("running call's result = %v", r)
	}
	select {
	case id := <-te.hold.started:
		t.Errorf("call %q ran after its wait for a slot timed out", id)
	default:
	}
}

func TestPerCallerCapLeavesOtherCallersAlone(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{MaxConcurrentCalls: 10, MaxCallsPerCaller: 1, MaxQueueWait: 10 * time.Millisecond})
	alice := startBatch(t, as("alice"), te, calls(call("a1", "hold", "")))

	_, err := te.runErr(as("alice"), calls(call("a2", "echo", `{}`)))
	if CodeOf(err) != ResourceExhausted || !strings.Contains(err.Error(), "this caller is running its limit of 1") {
		t.Errorf("alice's second batch: err = %v, want ResourceExhausted for the per-caller limit", err)
	}
	bob := startBatch(t, as("bob"), te, calls(call("b1", "hold", "")))

	te.hold.releaseAll()
	for name, stream := range map[string]*liveBatch{"alice": alice, "bob": bob} {
		if _, err := drain(stream); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	waitFor(t, func() bool {
		return te.e.Stats().Callers == 0
	})
}

// TestTimeInTheQueueDoesNotCountAgainstTheTimeout: a call of an accepted
// batch that waits for a slot starts its tool with its whole timeout
// (docs/limits.md). The second call waits at least a second for the one
// slot; a deadline counted from before the wait would leave it at most
// its timeout less that second.
func TestTimeInTheQueueDoesNotCountAgainstTheTimeout(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	gate := make(chan struct{})
	left := make(chan time.Duration, 1)
	dl := tools.Tool{Name: "deadline", Annotations: tools.Annotations{ReadOnly: true}, Handler: func(ctx context.Context, c *tools.Call) (*tools.Result, error) {
		if n.Add(1) == 1 {
			<-gate // holds the one slot
			return tools.Text("first"), nil
		}
		d, _ := ctx.Deadline()
		left <- time.Until(d)
		return tools.Text("second"), nil
	}}
	te := newTestBed(t, Config{MaxConcurrentCalls: 1}, dl)
	const timeout = 10 * time.Second
	mk := func(id string) *toolwirev1.ToolCall {
		return &toolwirev1.ToolCall{CallId: id, Name: "deadline", Timeout: durationpb.New(timeout)}
	}
	done := make(chan []*toolwirev1.ExecuteBatchResponse, 1)
	go func() {
		events, _ := te.runErr(context.Background(), calls(mk("x"), mk("y")))
		done <- events
	}()
	waitFor(t, func() bool { return te.e.Stats().SlotWaiters == 1 })
	waiting := time.Now()
	time.Sleep(time.Second) // the queue time under test, not a bound
	waited := time.Since(waiting)
	close(gate)
	events := <-done
	for id, r := range results(t, events) {
		if r.GetIsError() {
			t.Errorf("call %s: %v", id, r)
		}
	}
	if l := <-left; l <= timeout-waited {
		t.Errorf("the call that waited %v for a slot started with %v of its %v timeout left; the wait was counted against it", waited, l, timeout)
	}
}
