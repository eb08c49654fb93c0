package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// TestNoTransport enforces the package's import rule: nothing engine
// imports, directly or through its dependencies, is gRPC. The generated
// package gen/toolwire/v1 holds the gRPC stubs beside the message types the
// engine speaks in, so the walk does not follow it; the stubs' own imports
// never reach the engine's code.
func TestNoTransport(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	const self, gen = "github.com/toolwire/toolwire/engine", "github.com/toolwire/toolwire/gen/toolwire/v1"
	via := map[string]string{self: ""}
	queue := []string{self}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(p, "google.golang.org/grpc") {
			t.Errorf("engine reaches %s (through %s); it must stay transport-free: map codes in the surface", p, via[p])
			continue
		}
		for _, q := range imports[p] {
			if _, seen := via[q]; !seen && q != gen {
				via[q] = p
				queue = append(queue, q)
			}
		}
	}
	if _, ok := via["github.com/toolwire/toolwire/tools"]; !ok {
		t.Fatal("the walk did not reach tools: the check is broken")
	}
}

// recorder is a plain sink: it keeps the events it is sent, and fails its
// Send calls after failAfter of them when failAfter > 0.
type recorder struct {
	mu        sync.Mutex
	events    []*toolwirev1.ExecuteBatchResponse
	failAfter int
}

var errSinkGone = errors.New("sink gone")

func (r *recorder) Send(ev *toolwirev1.ExecuteBatchResponse) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failAfter > 0 && len(r.events) >= r.failAfter {
		return errSinkGone
	}
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) results() map[string]*toolwirev1.CallResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*toolwirev1.CallResult{}
	for _, ev := range r.events {
		if res := ev.GetResult(); res != nil {
			out[res.GetCallId()] = res
		}
	}
	return out
}

// engineTools are a read-only echo, a write that logs its start and end,
// and a hold that returns only when cancelled.
func engineTools(t *testing.T, log func(string)) *tools.Snapshot {
	t.Helper()
	reg, err := tools.NewRegistry(
		tools.Tool{Name: "echo", Annotations: tools.Annotations{ReadOnly: true}, Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
			log("echo " + c.ID)
			return tools.Text("echo " + c.ID), nil
		}},
		tools.Tool{Name: "write", Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
			log("write " + c.ID + " start")
			time.Sleep(20 * time.Millisecond)
			log("write " + c.ID + " end")
			return tools.Text("wrote"), nil
		}},
		tools.Tool{Name: "hold", Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg.Snapshot()
}

func newTestEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	return newTestEngineWith(t, cfg, Deps{})
}

// newTestEngineWith is newTestEngine with deps, logging nowhere.
func newTestEngineWith(t *testing.T, cfg Config, deps Deps) *Engine {
	t.Helper()
	deps.Logger = slog.New(slog.DiscardHandler)
	e := New(cfg, deps)
	t.Cleanup(e.Close)
	return e
}

func calls(cs ...*toolwirev1.ToolCall) *toolwirev1.ExecuteBatchRequest {
	return &toolwirev1.ExecuteBatchRequest{Calls: cs}
}

func tc(id, name string) *toolwirev1.ToolCall {
	return &toolwirev1.ToolCall{CallId: id, Name: name}
}

func TestRunOneCallBatchWithAPlainSink(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	snap := engineTools(t, func(string) {})
	var sink recorder
	if err := e.Run(context.Background(), snap, calls(tc("a", "echo")), &sink); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var kinds []string
	for _, ev := range sink.events {
		switch ev.GetEvent().(type) {
		case *toolwirev1.ExecuteBatchResponse_Accepted:
			kinds = append(kinds, "accepted")
		case *toolwirev1.ExecuteBatchResponse_Started:
			kinds = append(kinds, "started")
		case *toolwirev1.ExecuteBatchResponse_Result:
			kinds = append(kinds, "result")
		case *toolwirev1.ExecuteBatchResponse_Finished:
			kinds = append(kinds, "finished")
		}
	}
	if got := strings.Join(kinds, " "); got != "accepted started result finished" {
		t.Errorf("events %q, want accepted started result finished", got)
	}
	r := sink.results()["a"]
	if r.GetIsError() || r.GetContent()[0].GetText().GetText() != "echo a" {
		t.Errorf("result %v, want echo a", r)
	}
	if f := sink.events[len(sink.events)-1].GetFinished(); f.GetSucceeded() != 1 || f.GetBatchId() != sink.events[0].GetAccepted().GetBatchId() {
		t.Errorf("finished %v, want 1 succeeded in the accepted batch", f)
	}
}

func TestRunLanesInOrder(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	var mu sync.Mutex
	var order []string
	snap := engineTools(t, func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() })
	var sink recorder
	req := calls(tc("w1", "write"), tc("r1", "echo"), tc("r2", "echo"), tc("w2", "write"))
	if err := e.Run(context.Background(), snap, req, &sink); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var lanes []string
	for _, l := range sink.events[0].GetAccepted().GetLanes() {
		lanes = append(lanes, strings.Join(l.GetCallIds(), "+"))
	}
	if got := strings.Join(lanes, " "); got != "w1 r1+r2 w2" {
		t.Errorf("lanes %q, want w1 r1+r2 w2", got)
	}
	// The reads run between the writes, in either order.
	if len(order) != 6 || order[0] != "write w1 start" || order[1] != "write w1 end" ||
		!strings.HasPrefix(order[2], "echo r") || !strings.HasPrefix(order[3], "echo r") || order[4] != "write w2 start" {
		t.Errorf("ran in the order %q; want w1, then the reads, then w2", order)
	}
}

func TestRunRefusesWithCodedErrors(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{MaxCallsPerBatch: 2})
	snap := engineTools(t, func(string) {})
	tests := []struct {
		name string
		req  *toolwirev1.ExecuteBatchRequest
		code Code
		msg  string
	}{
		{"no calls", calls(), InvalidArgument, "batch has no calls"},
		{"too many calls", calls(tc("a", "echo"), tc("b", "echo"), tc("c", "echo")), InvalidArgument, "batch has 3 calls; the limit is 2"},
		{"duplicate IDs", calls(tc("a", "echo"), tc("a", "echo")), InvalidArgument, `calls 0 and 1 share call_id "a"`},
	}
	for _, tt := range tests {
		var sink recorder
		err := e.Run(context.Background(), snap, tt.req, &sink)
		var coded *Error
		if !errors.As(err, &coded) || CodeOf(err) != tt.code || coded.Message != tt.msg {
			t.Errorf("%s: err %v (code %v); want %v %q", tt.name, err, CodeOf(err), tt.code, tt.msg)
		}
		if len(sink.events) != 0 {
			t.Errorf("%s: %d events sent for a refused batch", tt.name, len(sink.events))
		}
	}

	e.Drain() // nothing runs: returns at once
	err := e.Run(context.Background(), snap, calls(tc("a", "echo")), &recorder{})
	if CodeOf(err) != Unavailable {
		t.Errorf("while draining: %v, want Unavailable", err)
	}
}

func TestFailedSendCancelsCallsWhoseResultsAreStillRecorded(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	snap := engineTools(t, func(string) {})
	// BatchAccepted goes; the Send of w's CallStarted fails while w runs.
	sink := &recorder{failAfter: 1}
	req := calls(tc("w", "write"), tc("h", "hold"))
	req.Calls[0].IdempotencyKey = "k"
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background(), snap, req, sink) }()
	select {
	case err := <-done:
		if !errors.Is(err, errSinkGone) {
			t.Fatalf("Run: %v, want the sink's error", err)
		}
	case <-testDeadline(t):
		t.Fatal("Run did not return after its sink failed: the held call was not cancelled")
	}
	if st := e.Stats(); st.Batches != 0 || st.CallsRunning != 0 {
		t.Errorf("after Run: %+v, want nothing running", st)
	}
	// w finished after the failure; its result was recorded under its key
	// all the same, so a retry replays it instead of writing again.
	var again recorder
	retry := calls(tc("w2", "write"))
	retry.Calls[0].IdempotencyKey = "k"
	if err := e.Run(context.Background(), snap, retry, &again); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if r := again.results()["w2"]; !r.GetReplayed() || r.GetIsError() {
		t.Errorf("retry of the keyed call: %v; want its recorded result replayed", r)
	}
}

func TestCallIsABatchOfOne(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Config{})
	snap := engineTools(t, func(string) {})
	res, err := e.Call(context.Background(), snap, tc("a", "echo"), "")
	if err != nil || res.GetIsError() || res.GetContent()[0].GetText().GetText() != "echo a" {
		t.Errorf("Call(echo) = %v, %v; want echo a", res, err)
	}
	res, err = e.Call(context.Background(), snap, tc("b", "nope"), "")
	if err != nil || res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL {
		t.Errorf("Call(nope) = %v, %v; want an UNKNOWN_TOOL result", res, err)
	}
	if _, err := e.Call(context.Background(), snap, tc("", "echo"), ""); CodeOf(err) != InvalidArgument {
		t.Errorf("Call without a call_id: %v; want InvalidArgument", err)
	}
}

// TestBatchLineNamesWhyASinkFailed checks that when a sink's Send fails with
// an error of its own (a gRPC stream's, after the client went), the batch's
// debug line says why from the caller's context: cancelled, not unknown.
func TestBatchLineNamesWhyASinkFailed(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	var mu sync.Mutex
	e := New(Config{}, Deps{Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	t.Cleanup(e.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := 0
	sink := SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error {
		if sent++; sent > 1 {
			cancel() // the client has gone; the transport says so its own way
			return errSinkGone
		}
		return nil
	})
	if err := e.Run(ctx, engineTools(t, func(string) {}), calls(tc("a", "echo")), sink); err == nil {
		t.Fatal("Run returned no error after its sink failed")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), `"msg":"batch finished"`) || !strings.Contains(logs.String(), `"outcome":"cancelled"`) {
		t.Errorf("the batch line does not say cancelled:\n%s", logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
