package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// The behaviour tests drive Run as a surface does, with plain sinks: a
// testBed is an engine over the diag tools, the tools of testTools and
// holdTools, and a test's own.

// testBed is an engine and the registry its batches run against.
type testBed struct {
	e     *Engine
	reg   *tools.Registry
	state *toolState
	hold  *holdTools
}

// newTestBed returns an engine made from cfg, logging nowhere, over the
// test tools and extra, stopped when the test ends.
func newTestBed(tb testing.TB, cfg Config, extra ...tools.Tool) *testBed {
	tb.Helper()
	return newTestBedWith(tb, cfg, Deps{}, extra...)
}

// newTestBedWith is newTestBed with deps (logging nowhere unless deps say
// otherwise).
func newTestBedWith(tb testing.TB, cfg Config, deps Deps, extra ...tools.Tool) *testBed {
	tb.Helper()
	st := &toolState{release: make(chan struct{})}
	h := newHoldTools()
	reg, err := tools.NewRegistry(append(append(append(diag.Tools(), testTools(st)...), h.tools()...), extra...)...)
	if err != nil {
		tb.Fatal(err)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	e := New(cfg, deps)
	tb.Cleanup(func() {
		close(st.release) // lets tools that ignore cancellation return
		h.releaseAll()
		e.CancelCalls() // what a test left running ends now, with results
		e.Drain()
		// An abandoned tool holds its slot until it returns.
		waitFor(tb, func() bool { return e.Stats().CallsRunning == 0 })
		e.Close()
	})
	return &testBed{e: e, reg: reg, state: st, hold: h}
}

// run runs a batch and returns every event, failing the test on an error.
func (te *testBed) run(tb testing.TB, req *toolwirev1.ExecuteBatchRequest) []*toolwirev1.ExecuteBatchResponse {
	tb.Helper()
	events, err := te.runErr(context.Background(), req)
	if err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return events
}

// runErr runs a batch with ctx and returns its events and Run's error.
func (te *testBed) runErr(ctx context.Context, req *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.ExecuteBatchResponse, error) {
	var sink recorder
	err := te.e.Run(ctx, te.reg.Snapshot(), req, &sink)
	return sink.events, err
}

// runAs runs a batch for caller, failing the test on an error.
func (te *testBed) runAs(tb testing.TB, caller string, req *toolwirev1.ExecuteBatchRequest) []*toolwirev1.ExecuteBatchResponse {
	tb.Helper()
	events, err := te.runErr(as(caller), req)
	if err != nil {
		tb.Fatalf("Run as %q: %v", caller, err)
	}
	return events
}

// as returns a context whose batches come from caller.
func as(caller string) context.Context { return WithCaller(context.Background(), caller) }

// liveBatch is a batch running in the background, its events collected.
type liveBatch struct {
	mu      sync.Mutex
	events  []*toolwirev1.ExecuteBatchResponse
	started chan struct{} // closed at the first CallStarted
	once    sync.Once
	done    chan error // Run's error
}

func (lb *liveBatch) Send(ev *toolwirev1.ExecuteBatchResponse) error {
	lb.mu.Lock()
	lb.events = append(lb.events, ev)
	lb.mu.Unlock()
	if ev.GetStarted() != nil {
		lb.once.Do(func() { close(lb.started) })
	}
	return nil
}

// startBatch runs req with ctx in the background and returns once one of
// its calls has started, so that a call is known to be running.
func startBatch(tb testing.TB, ctx context.Context, te *testBed, req *toolwirev1.ExecuteBatchRequest) *liveBatch {
	tb.Helper()
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

// drain waits for the batch to end and returns its events and Run's error.
func drain(lb *liveBatch) ([]*toolwirev1.ExecuteBatchResponse, error) {
	err := <-lb.done
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.events, err
}

// message is the message of an engine *Error, or the error's text.
func message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// call builds a ToolCall.
func call(id, name, args string) *toolwirev1.ToolCall {
	return &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: args}
}

// results returns the results of events by call ID, failing on a call with
// more than one result.
func results(tb testing.TB, events []*toolwirev1.ExecuteBatchResponse) map[string]*toolwirev1.CallResult {
	tb.Helper()
	out := map[string]*toolwirev1.CallResult{}
	for _, ev := range events {
		if r := ev.GetResult(); r != nil {
			if _, dup := out[r.GetCallId()]; dup {
				tb.Errorf("call %q has more than one result", r.GetCallId())
			}
			out[r.GetCallId()] = r
		}
	}
	return out
}

// text is a result's text blocks, joined.
func text(r *toolwirev1.CallResult) string {
	var b strings.Builder
	for _, c := range r.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// toolState is what the test tools share with a test.
type toolState struct {
	mu      sync.Mutex
	log     []string // "start id" / "end id", in order
	running atomic.Int32
	peak    atomic.Int32
	reports atomic.Int64
	ctxDone chan string // call IDs whose context ended, when set
	release chan struct{}
}

func (st *toolState) record(s string) {
	st.mu.Lock()
	st.log = append(st.log, s)
	st.mu.Unlock()
}

func (st *toolState) entries() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.log...)
}

type msArgs struct {
	MS int `json:"ms"`
}

// testTools returns tools with behaviour the invariants need to observe.
func testTools(st *toolState) []tools.Tool {
	work := func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
		var a msArgs
		_ = json.Unmarshal(call.Arguments, &a)
		n := st.running.Add(1)
		defer st.running.Add(-1)
		for {
			p := st.peak.Load()
			if n <= p || st.peak.CompareAndSwap(p, n) {
				break
			}
		}
		st.record("start " + call.ID)
		defer st.record("end " + call.ID)
		select {
		case <-time.After(time.Duration(a.MS) * time.Millisecond):
			return tools.Text("done " + call.ID), nil
		case <-ctx.Done():
			if st.ctxDone != nil {
				st.ctxDone <- call.ID
			}
			return nil, ctx.Err()
		}
	}
	msSchema := json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}}}`)
	return []tools.Tool{
		{Name: "read", Description: "safe work", InputSchema: msSchema, Annotations: tools.Annotations{ReadOnly: true}, Handler: work},
		{Name: "write", Description: "unsafe work", InputSchema: msSchema, Annotations: tools.Annotations{Destructive: true}, Handler: work},
		{Name: "boom", Description: "panics", Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			panic("kaboom")
		}},
		{Name: "stubborn", Description: "ignores cancellation", Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			<-st.release
			return tools.Text("too late"), nil
		}},
		{Name: "own_error", Description: "reports its own error when cancelled", Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			<-ctx.Done()
			return tools.Errorf("my own error"), nil
		}},
		{Name: "big", Description: "returns n bytes", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				var a struct{ N int }
				_ = json.Unmarshal(call.Arguments, &a)
				return &tools.Result{
					Content: []tools.Content{{Text: strings.Repeat("x", a.N)}, {Data: make([]byte, a.N), MIMEType: "image/png"}},
					Details: json.RawMessage(`{"n":` + strings.Repeat("1", 3) + `}`),
				}, nil
			}},
		{Name: "chatty", Description: "reports n progress events of size bytes", Annotations: tools.Annotations{ReadOnly: true},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"size":{"type":"integer"}}}`),
			Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
				var a struct{ N, Size int }
				_ = json.Unmarshal(call.Arguments, &a)
				chunk := strings.Repeat("o", a.Size)
				for range a.N {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					call.Output(chunk)
					st.reports.Add(1)
				}
				return tools.Text("reported"), nil
			}},
		{Name: "ticker", Description: "reports progress every 20ms for ms milliseconds", InputSchema: msSchema,
			Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
				var a msArgs
				_ = json.Unmarshal(call.Arguments, &a)
				end := time.After(time.Duration(a.MS) * time.Millisecond)
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-end:
						return tools.Text("ticked"), nil
					case <-tick.C:
						call.Progressf(1, 2, "tick")
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
			}},
		{Name: "bad_output", Description: "returns output that violates its schema",
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
			Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
				return &tools.Result{StructuredContent: json.RawMessage(`{"n":"not a number"}`)}, nil
			}},
	}
}

// holdTools are read-only tools that block until the test releases them:
// "hold" also returns when its context ends, "hold_stubborn" does not.
type holdTools struct {
	started  chan string // call IDs, as they start
	release  chan struct{}
	released atomic.Bool
}

func newHoldTools() *holdTools {
	return &holdTools{started: make(chan string, 64), release: make(chan struct{})}
}

func (h *holdTools) releaseAll() {
	if h.released.CompareAndSwap(false, true) {
		close(h.release)
	}
}

func (h *holdTools) tools() []tools.Tool {
	hold := func(stubborn bool) tools.Handler {
		return func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			h.started <- call.ID
			done := ctx.Done()
			if stubborn {
				done = nil
			}
			select {
			case <-h.release:
				return tools.Text("released"), nil
			case <-done:
				return nil, ctx.Err()
			}
		}
	}
	return []tools.Tool{
		{Name: "hold", Description: "blocks until released", Annotations: tools.Annotations{ReadOnly: true}, Handler: hold(false)},
		{Name: "hold_stubborn", Description: "blocks until released, ignoring cancellation", Annotations: tools.Annotations{ReadOnly: true}, Handler: hold(true)},
	}
}
