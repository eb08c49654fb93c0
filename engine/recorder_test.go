package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// callRecorder is a CallRecorder that notes what it is told, in order,
// and refuses the calls whose ID refuse names.
type callRecorder struct {
	nopObserver
	mu     sync.Mutex
	seen   []string // "record id", "running id", "ended id"
	refuse func(id string) error
}

func (r *callRecorder) note(s string) {
	r.mu.Lock()
	r.seen = append(r.seen, s)
	r.mu.Unlock()
}

func (r *callRecorder) RecordCall(_ context.Context, c *CallInfo) error {
	r.note("record " + c.Call.GetCallId())
	if r.refuse != nil {
		return r.refuse(c.Call.GetCallId())
	}
	return nil
}

func (r *callRecorder) CallRunning(_ context.Context, c *CallInfo) {
	r.note("running " + c.Call.GetCallId())
}

func (r *callRecorder) CallEnded(_ context.Context, c *CallInfo, _ *toolwirev1.CallResult) {
	r.note("ended " + c.Call.GetCallId())
}

func (r *callRecorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// TestCallRecorder: a CallRecorder among the observers records each
// admitted call before it runs; a call it cannot record ends
// NOT_PERMITTED with its reason, is not run, and holds no idempotency key
// (sent again once it can be recorded, it runs); a call the admission
// denies, or of an unknown tool, is never recorded.
func TestCallRecorder(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	counted := tools.Tool{Name: "counted", Description: "counts its runs", InputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) { ran.Add(1); return tools.Text("ran"), nil }}
	var down atomic.Bool
	rec := &callRecorder{refuse: func(id string) error {
		if down.Load() {
			return errors.New("the audit trail cannot be written")
		}
		return nil
	}}
	deny := admit{decide: func(_ *Identity, _ *tools.Tool, args json.RawMessage) Verdict {
		if strings.Contains(string(args), "forbidden") {
			return Verdict{Effect: Deny, Reason: "no"}
		}
		return Verdict{}
	}}
	// The recorder is one of two observers: Observers' list finds it.
	te := newTestBedWith(t, Config{}, Deps{Observer: Observers(nopObserver{}, rec), Admission: deny}, counted)

	res := results(t, te.run(t, calls(
		call("a", "counted", `{}`),
		call("denied", "counted", `{"x":"forbidden"}`),
		call("unknown", "nope", `{}`))))
	if res["a"].GetIsError() || ran.Load() != 1 {
		t.Fatalf("a recorded call: %v (ran %d)", res["a"], ran.Load())
	}
	if got, want := strings.Join(rec.events(), ","), "record a,running a,ended a"; !strings.HasPrefix(got, want) {
		t.Errorf("events %s; want the record before the run: %s…", got, want)
	}
	for _, e := range rec.events() {
		if e == "record denied" || e == "record unknown" {
			t.Errorf("%q: a call that does not go on was recorded", e)
		}
	}

	down.Store(true)
	keyed := call("k", "counted", `{}`)
	keyed.IdempotencyKey = "key-1"
	r := results(t, te.run(t, calls(keyed)))["k"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED || !strings.Contains(text(r), "the audit trail cannot be written") ||
		!strings.Contains(text(r), "Nothing was run") || ran.Load() != 1 {
		t.Errorf("a call that cannot be recorded: %v (ran %d times in all)", r, ran.Load())
	}
	down.Store(false)
	r = results(t, te.run(t, calls(keyed)))["k"]
	if r.GetIsError() || r.GetReplayed() || ran.Load() != 2 {
		t.Errorf("the refused keyed call sent again: %v (ran %d times in all); want it run, not replayed", r, ran.Load())
	}
}

// blockingRecorder waits in RecordCall until its call's context ends.
type blockingRecorder struct {
	nopObserver
	entered chan struct{}
	ended   chan *toolwirev1.CallResult // the call's result, as CallEnded is told, sent or not
}

func (r *blockingRecorder) CallEnded(_ context.Context, _ *CallInfo, res *toolwirev1.CallResult) {
	r.ended <- res
}

func (r *blockingRecorder) RecordCall(ctx context.Context, _ *CallInfo) error {
	close(r.entered)
	<-ctx.Done()
	return errors.New("the audit trail was still writing")
}

// TestCallRecorderCancelled: a call cancelled while its record is being
// written ends CANCELLED, not NOT_PERMITTED: cancellation outranks the
// refusal it caused.
func TestCallRecorderCancelled(t *testing.T) {
	t.Parallel()
	rec := &blockingRecorder{entered: make(chan struct{}), ended: make(chan *toolwirev1.CallResult, 1)}
	te := newTestBedWith(t, Config{}, Deps{Observer: rec})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-rec.entered
		cancel()
	}()
	te.runErr(ctx, calls(call("a", "echo", `{"text":"x"}`)))
	if r := <-rec.ended; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED {
		t.Errorf("a call cancelled while recorded: %v", r)
	}
}
