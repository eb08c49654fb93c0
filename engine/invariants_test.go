package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	kindNone        = toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED
	kindUnknown     = toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL
	kindInvalidArgs = toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS
	kindToolError   = toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR
	kindTimeout     = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT
	kindCancelled   = toolwirev1.ErrorKind_ERROR_KIND_CANCELLED
	kindSkipped     = toolwirev1.ErrorKind_ERROR_KIND_SKIPPED
)

func TestInvariant1_EveryCallGetsExactlyOneResultAndFinishedComesLast(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("a", "echo", `{"text":"hi"}`),
		call("b", "read", `{"ms":20}`),
		call("c", "nope", `{}`),
		call("d", "echo", `{"text":1}`),
		call("e", "fail", `{"message":"bad"}`),
		call("f", "boom", ``),
		call("g", "write", `{"ms":1}`),
		call("h", "sleep", `{"ms":120}`),
	}}
	events := te.run(t, req)

	if got := events[0].GetAccepted(); got == nil || got.GetBatchId() == "" {
		t.Fatalf("first event = %v, want BatchAccepted with a batch ID", events[0])
	}
	last := events[len(events)-1].GetFinished()
	if last == nil {
		t.Fatalf("last event = %v, want BatchFinished", events[len(events)-1])
	}
	got := results(t, events)
	if len(got) != len(req.GetCalls()) {
		t.Fatalf("got %d results, want %d", len(got), len(req.GetCalls()))
	}
	want := map[string]toolwirev1.ErrorKind{
		"a": kindNone, "b": kindNone, "c": kindUnknown, "d": kindInvalidArgs,
		"e": kindToolError, "f": kindToolError, "g": kindNone, "h": kindNone,
	}
	for i, c := range req.GetCalls() {
		r := got[c.GetCallId()]
		if r.GetIndex() != uint32(i) || r.GetToolName() != c.GetName() {
			t.Errorf("result %q: index %d tool %q, want %d %q", c.GetCallId(), r.GetIndex(), r.GetToolName(), i, c.GetName())
		}
		if r.GetErrorKind() != want[c.GetCallId()] || r.GetIsError() != (want[c.GetCallId()] != kindNone) {
			t.Errorf("result %q: kind %v is_error %v, want %v", c.GetCallId(), r.GetErrorKind(), r.GetIsError(), want[c.GetCallId()])
		}
		if r.GetDuration() == nil {
			t.Errorf("result %q has no duration", c.GetCallId())
		}
	}
	wantFinished := &toolwirev1.BatchFinished{BatchId: events[0].GetAccepted().GetBatchId(), Succeeded: 4, Failed: 4}
	if diff := cmp.Diff(wantFinished, last, protocmp.Transform(), protocmp.IgnoreFields(last, "duration")); diff != "" {
		t.Errorf("BatchFinished mismatch (-want +got):\n%s", diff)
	}
	// Every per-call event names its call and batch index.
	for _, ev := range events {
		var id string
		var idx uint32
		switch e := ev.GetEvent().(type) {
		case *toolwirev1.ExecuteBatchResponse_Started:
			id, idx = e.Started.GetCallId(), e.Started.GetIndex()
		case *toolwirev1.ExecuteBatchResponse_Progress:
			id, idx = e.Progress.GetCallId(), e.Progress.GetIndex()
		default:
			continue
		}
		if req.GetCalls()[idx].GetCallId() != id {
			t.Errorf("event %v: index %d names call %q", ev, idx, req.GetCalls()[idx].GetCallId())
		}
	}
}

func TestInvariant1_NoEventForACallAfterItsResult(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	events := te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("a", "chatty", `{"n":200,"size":10}`), call("b", "chatty", `{"n":200,"size":10}`), call("c", "sleep", `{"ms":130}`),
	}})
	done := map[string]bool{}
	progress := 0
	for _, ev := range events {
		switch e := ev.GetEvent().(type) {
		case *toolwirev1.ExecuteBatchResponse_Result:
			done[e.Result.GetCallId()] = true
		case *toolwirev1.ExecuteBatchResponse_Progress:
			progress++
			if done[e.Progress.GetCallId()] {
				t.Fatalf("progress for %q after its result", e.Progress.GetCallId())
			}
		case *toolwirev1.ExecuteBatchResponse_Started:
			if done[e.Started.GetCallId()] {
				t.Fatalf("start of %q after its result", e.Started.GetCallId())
			}
		}
	}
	if progress < 400 {
		t.Errorf("got %d progress events, want at least 400", progress)
	}
}

func TestInvariant1_ClientCancelStartsNothingNew(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	te.state.ctxDone = make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	stream := startBatch(t, ctx, te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("a", "write", `{"ms":10000}`), call("b", "write", `{"ms":1}`),
	}})
	cancel()
	select {
	case id := <-te.state.ctxDone:
		if id != "a" {
			t.Errorf("cancelled call %q, want a", id)
		}
	case <-testDeadline(t):
		t.Fatal("the running tool's context was not cancelled")
	}
	if _, err := drain(stream); CodeOf(err) != Canceled {
		t.Errorf("Run after cancel: %v, want Canceled", err)
	}
	// Wait for the engine to finish the batch, then check b never started.
	waitFor(t, func() bool { return te.state.running.Load() == 0 })
	time.Sleep(50 * time.Millisecond)
	if slices.Contains(te.state.entries(), "start b") {
		t.Errorf("call b started after the client cancelled: %v", te.state.entries())
	}
}

func TestInvariant2_LanesRunInOrderAndSafeCallsInParallel(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("r1", "read", `{"ms":150}`), call("r2", "read", `{"ms":150}`), call("r3", "read", `{"ms":150}`),
		call("w", "write", `{"ms":10}`),
		call("r4", "read", `{"ms":10}`),
	}}
	events := te.run(t, req)
	wantLanes := []*toolwirev1.Lane{
		{Index: 0, CallIds: []string{"r1", "r2", "r3"}, Parallel: true},
		{Index: 1, CallIds: []string{"w"}},
		{Index: 2, CallIds: []string{"r4"}, Parallel: true},
	}
	if diff := cmp.Diff(wantLanes, events[0].GetAccepted().GetLanes(), protocmp.Transform()); diff != "" {
		t.Errorf("lane plan mismatch (-want +got):\n%s", diff)
	}
	if p := te.state.peak.Load(); p != 3 {
		t.Errorf("peak concurrency %d, want 3 (the three reads at once)", p)
	}
	log := te.state.entries()
	pos := func(s string) int { return slices.Index(log, s) }
	for _, r := range []string{"r1", "r2", "r3"} {
		if pos("end "+r) > pos("start w") {
			t.Errorf("write started before %s ended: %v", r, log)
		}
	}
	if pos("end w") > pos("start r4") {
		t.Errorf("r4 started before the write ended: %v", log)
	}
	// Started events carry their lane.
	for _, ev := range events {
		if s := ev.GetStarted(); s != nil && s.GetCallId() == "w" && s.GetLane() != 1 {
			t.Errorf("w started in lane %d, want 1", s.GetLane())
		}
	}
}

func TestInvariant2_MaxParallelBoundsALane(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		server   int
		batch    uint32
		wantPeak int32
	}{
		{"batch asks for less", 16, 2, 2},
		{"server bound wins", 3, 10, 3},
		{"sequential option", 16, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			te := newTestBed(t, Config{MaxParallel: tt.server})
			var calls []*toolwirev1.ToolCall
			for i := range 6 {
				calls = append(calls, call(fmt.Sprint(i), "read", `{"ms":60}`))
			}
			opts := &toolwirev1.BatchOptions{MaxParallel: tt.batch, Sequential: tt.batch == 0}
			te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: calls, Options: opts})
			if p := te.state.peak.Load(); p != tt.wantPeak {
				t.Errorf("peak concurrency %d, want %d", p, tt.wantPeak)
			}
		})
	}
}

func TestInvariant2_StopOnErrorSkipsLaterLanes(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	events := te.run(t, &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{
			call("a", "echo", `{"text":"x"}`), call("b", "fail", `{"message":"no"}`), call("c", "read", `{"ms":1}`), call("d", "write", `{}`),
		},
		Options: &toolwirev1.BatchOptions{StopOnError: true},
	})
	got := results(t, events)
	for id, want := range map[string]toolwirev1.ErrorKind{"a": kindNone, "b": kindToolError, "c": kindSkipped, "d": kindSkipped} {
		if got[id].GetErrorKind() != want {
			t.Errorf("%s: kind %v, want %v", id, got[id].GetErrorKind(), want)
		}
	}
	if len(te.state.entries()) != 0 {
		t.Errorf("skipped calls ran: %v", te.state.entries())
	}
	if f := events[len(events)-1].GetFinished(); f.GetSkipped() != 2 || f.GetFailed() != 1 || f.GetSucceeded() != 1 {
		t.Errorf("finished = %v, want 1 succeeded, 1 failed, 2 skipped", f)
	}
}

func TestInvariant3_SafetyFromReadOnlyWithOverridesAndUnknownNeverSafe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		safe  map[string]bool
		calls []string
		want  []bool // parallel flag per lane
	}{
		{"read-only is safe", nil, []string{"read", "read"}, []bool{true}},
		{"not read-only is unsafe", nil, []string{"write", "write"}, []bool{false, false}},
		{"override makes unsafe", map[string]bool{"read": false}, []string{"read", "read"}, []bool{false, false}},
		{"override makes safe", map[string]bool{"write": true}, []string{"write", "write"}, []bool{true}},
		{"unknown is never safe", map[string]bool{"ghost": true}, []string{"read", "ghost", "read"}, []bool{true, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			te := newTestBed(t, Config{Safe: tt.safe})
			var calls []*toolwirev1.ToolCall
			for i, name := range tt.calls {
				calls = append(calls, call(fmt.Sprint(i), name, `{}`))
			}
			events := te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: calls})
			var got []bool
			for _, l := range events[0].GetAccepted().GetLanes() {
				got = append(got, l.GetParallel())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lane parallel flags (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInvariant4_ProblemsOfOneCallAreResults(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	tests := []struct {
		name     string
		call     *toolwirev1.ToolCall
		wantKind toolwirev1.ErrorKind
		wantText []string
	}{
		{"unknown tool lists names", call("x", "ech", `{}`), kindUnknown, []string{`unknown tool "ech"`, "echo", "sleep", "fail"}},
		{"wrapper dispatches nothing", call("x", "multi_tool_use.parallel", `{"tool_uses":[{"recipient_name":"functions.write","parameters":{}}]}`), kindUnknown, []string{"not a tool", "Nothing was run"}},
		{"wrapper by arguments", call("x", "parallel", `{"tool_uses":[]}`), kindUnknown, []string{"not a tool"}},
		{"not JSON", call("x", "echo", `{"text":`), kindInvalidArgs, []string{"not valid JSON"}},
		{"not an object", call("x", "echo", `["hi"]`), kindInvalidArgs, []string{"must be a JSON object, got an array"}},
		{"null", call("x", "echo", `null`), kindInvalidArgs, []string{"got null"}},
		{"missing field", call("x", "echo", `{}`), kindInvalidArgs, []string{"/: missing property 'text'"}},
		{"every violation named", call("x", "sleep", `{"ms":"soon","extra":1}`), kindInvalidArgs, []string{"/ms: got string, want integer", "additional properties 'extra'"}},
		{"empty arguments mean {}", call("x", "echo", ``), kindInvalidArgs, []string{"missing property 'text'"}},
		{"tool error", call("x", "fail", `{"message":"disk full"}`), kindToolError, []string{"disk full"}},
		{"panic", call("x", "boom", `{}`), kindToolError, []string{"panic: kaboom"}},
		{"output schema violation", call("x", "bad_output", `{}`), kindToolError, []string{"does not match its declared output schema", "/n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events := te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{tt.call, call("ok", "echo", `{"text":"still here"}`)}})
			got := results(t, events)
			r := got["x"]
			if r.GetErrorKind() != tt.wantKind || !r.GetIsError() {
				t.Errorf("kind %v is_error %v, want %v", r.GetErrorKind(), r.GetIsError(), tt.wantKind)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(text(r), w) {
					t.Errorf("result text %q does not contain %q", text(r), w)
				}
			}
			if strings.Contains(text(r), "goroutine") {
				t.Errorf("result leaks a stack trace: %q", text(r))
			}
			if ok := got["ok"]; ok.GetIsError() || text(ok) != "still here" {
				t.Errorf("the other call's result = %v, want success", ok)
			}
		})
	}
	if slices.Contains(te.state.entries(), "start x") {
		t.Error("a rejected call ran")
	}
}

func TestInvariant4_UnknownToolListIsCappedOrSaysNoneExist(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	var many []tools.Tool
	for i := range 30 {
		many = append(many, tools.Tool{Name: fmt.Sprintf("zz%02d", i), Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }})
	}
	if err := te.reg.Add(many...); err != nil {
		t.Fatal(err)
	}
	r := results(t, te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("x", "nope", "")}}))["x"]
	listed := strings.Count(strings.SplitN(text(r), "Registered tools: ", 2)[1], ",")
	if listed != MaxListedNames || !strings.Contains(text(r), "more)") {
		t.Errorf("listed %d commas in %q, want %d names and a note of the rest", listed, text(r), MaxListedNames)
	}
	// Of 30 and more tools the list shows 20: a misspelt name gets the
	// nearest one, wherever it sorts, and an unrelated one none.
	got := results(t, te.run(t, calls(call("a", "zz2", ""), call("b", "ECHO", ""), call("c", "nope", ""))))
	for id, want := range map[string]string{"a": `unknown tool "zz2"; did you mean "zz02"?`, "b": `unknown tool "ECHO"; did you mean "echo"?`, "c": `unknown tool "nope". Registered`} {
		if !strings.HasPrefix(text(got[id]), want) {
			t.Errorf("%s: %q; want it to start %q", id, text(got[id]), want)
		}
	}

	empty, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	var sink recorder
	if err := te.e.Run(context.Background(), empty.Snapshot(), calls(call("x", "nope", "")), &sink); err != nil {
		t.Fatal(err)
	}
	r = sink.results()["x"]
	if !strings.Contains(text(r), "no tools are registered") {
		t.Errorf("text %q, want it to say no tools exist", text(r))
	}
}

// TestUnknownToolsCostOncePerBatch: what UNKNOWN_TOOL results say of the
// catalog is worked out once per batch, and the nearest name once per
// misspelt name, for at most maxSuggested names a batch. Per call, a batch
// of 1024 misspelt calls on 10,000 tools took 14 s of CPU.
func TestUnknownToolsCostOncePerBatch(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	te := newTestBedWith(t, Config{}, Deps{Admission: admit{permitted: func(string, string) bool {
		asked.Add(1)
		return true
	}}})
	var many []tools.Tool
	for i := range 200 {
		many = append(many, tools.Tool{Name: fmt.Sprintf("tool_%03d", i), Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }})
	}
	if err := te.reg.Add(many...); err != nil {
		t.Fatal(err)
	}
	catalog := int64(te.reg.Snapshot().Len())
	var req toolwirev1.ExecuteBatchRequest
	for i := range 100 {
		req.Calls = append(req.Calls, call(fmt.Sprintf("same%d", i), "tol_005", "")) // one name, 100 calls
	}
	for i := range 12 {
		req.Calls = append(req.Calls, call(fmt.Sprintf("other%d", i), fmt.Sprintf("tool_%03dx", 100+i), ""))
	}
	got := results(t, te.run(t, &req))
	if n := asked.Load(); n > catalog+4*int64(len(req.Calls)) {
		t.Errorf("the admission was asked %d times for %d calls on %d tools; want the catalog once per batch", n, len(req.Calls), catalog)
	}
	// Each name's calls get the same answer; eight names get their nearest.
	answers := map[string]string{}
	for _, c := range req.Calls {
		txt := text(got[c.GetCallId()])
		if prev, ok := answers[c.GetName()]; ok && prev != txt {
			t.Fatalf("%s: two answers for %q: %q and %q", c.GetCallId(), c.GetName(), prev, txt)
		}
		answers[c.GetName()] = txt
	}
	suggested := 0
	for name, txt := range answers {
		if strings.Contains(txt, "did you mean") {
			suggested++
			want := strings.TrimSuffix(strings.Replace(name, "tol_", "tool_", 1), "x")
			if !strings.Contains(txt, fmt.Sprintf("did you mean %q?", want)) {
				t.Errorf("%q: %q; want it to suggest %q", name, txt, want)
			}
		}
	}
	if suggested != maxSuggested {
		t.Errorf("%d of %d names got their nearest; want %d", suggested, len(answers), maxSuggested)
	}
}

func TestInvariant4_MalformedBatchesAreInvalidArgument(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{MaxCallsPerBatch: 3, MaxArgumentBytes: 64})
	tests := []struct {
		name    string
		calls   []*toolwirev1.ToolCall
		options *toolwirev1.BatchOptions
		want    string
	}{
		{"no calls", nil, nil, "no calls"},
		{"too many calls", []*toolwirev1.ToolCall{call("a", "echo", ""), call("b", "echo", ""), call("c", "echo", ""), call("d", "echo", "")}, nil, "4 calls; the limit is 3"},
		{"empty call_id", []*toolwirev1.ToolCall{call("", "echo", "")}, nil, "empty call_id"},
		{"duplicate call_id", []*toolwirev1.ToolCall{call("a", "echo", ""), call("a", "echo", "")}, nil, `share call_id "a"`},
		{"oversize arguments", []*toolwirev1.ToolCall{call("a", "echo", `{"text":"`+strings.Repeat("x", 100)+`"}`)}, nil, "the limit is 64"},
		{"negative call timeout", []*toolwirev1.ToolCall{{CallId: "a", Name: "echo", Timeout: durationpb.New(-time.Second)}}, nil, "timeout"},
		{"negative batch timeout", []*toolwirev1.ToolCall{call("a", "echo", "")}, &toolwirev1.BatchOptions{Timeout: durationpb.New(-time.Second)}, "options.timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events, err := te.runErr(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: tt.calls, Options: tt.options})
			if CodeOf(err) != InvalidArgument || !strings.Contains(message(err), tt.want) {
				t.Errorf("err = %v, want InvalidArgument containing %q", err, tt.want)
			}
			if len(events) != 0 {
				t.Errorf("got %d events before the error, want none", len(events))
			}
		})
	}
}

func TestOverloadIsResourceExhausted(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{MaxConcurrentBatches: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := startBatch(t, ctx, te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "sleep", `{"ms":60000}`)}})
	_, err := te.runErr(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("b", "echo", `{"text":"x"}`)}})
	if CodeOf(err) != ResourceExhausted {
		t.Fatalf("second batch: %v, want ResourceExhausted", err)
	}
	cancel()
	if _, err := drain(stream); CodeOf(err) != Canceled {
		t.Errorf("the running batch after its cancellation: %v, want Canceled", err)
	}
	waitFor(t, func() bool {
		_, err := te.runErr(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("c", "echo", `{"text":"x"}`)}})
		return err == nil
	})
}

func TestInvariant5_DeadlineIsTheEarliestLimit(t *testing.T) {
	t.Parallel()
	slowTool := tools.Tool{Name: "limited", Timeout: 80 * time.Millisecond, InputSchema: []byte(`{"type":"object"}`),
		Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) { <-ctx.Done(); return nil, ctx.Err() }}
	tests := []struct {
		name     string
		cfg      Config
		call     *toolwirev1.ToolCall
		rpc      time.Duration
		wantKind toolwirev1.ErrorKind
		wantText string
	}{
		{"call timeout", Config{}, &toolwirev1.ToolCall{CallId: "x", Name: "sleep", Arguments: `{"ms":5000}`, Timeout: durationpb.New(50 * time.Millisecond)}, 0, kindTimeout, "timed out after 50ms"},
		{"tool limit below the call's", Config{}, &toolwirev1.ToolCall{CallId: "x", Name: "limited", Timeout: durationpb.New(time.Minute)}, 0, kindTimeout, "timed out after 80ms"},
		{"server max", Config{MaxCallTimeout: 60 * time.Millisecond}, &toolwirev1.ToolCall{CallId: "x", Name: "sleep", Arguments: `{"ms":5000}`, Timeout: durationpb.New(time.Minute)}, 0, kindTimeout, "timed out after 60ms"},
		{"server default", Config{DefaultCallTimeout: 70 * time.Millisecond}, call("x", "sleep", `{"ms":5000}`), 0, kindTimeout, "timed out after 70ms"},
		// The margin is what the server has to send the result before the
		// RPC's deadline: a second, since a loaded 2-core machine under
		// -race took more than the 200 ms it once was.
		{"rpc deadline less margin", Config{DeadlineMargin: time.Second}, call("x", "sleep", `{"ms":60000}`), 2 * time.Second, kindTimeout, "the client's deadline"},
		{"within every limit", Config{}, &toolwirev1.ToolCall{CallId: "x", Name: "sleep", Arguments: `{"ms":10}`, Timeout: durationpb.New(30 * time.Second)}, time.Minute, kindNone, "slept_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			te := newTestBed(t, tt.cfg, slowTool)
			ctx := context.Background()
			if tt.rpc > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.rpc)
				defer cancel()
			}
			events, err := te.runErr(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{tt.call}})
			if err != nil {
				t.Fatalf("ExecuteBatch: %v (the result must arrive before the RPC deadline)", err)
			}
			r := results(t, events)["x"]
			if r.GetErrorKind() != tt.wantKind || !strings.Contains(text(r), tt.wantText) {
				t.Errorf("result %v %q, want %v containing %q", r.GetErrorKind(), text(r), tt.wantKind, tt.wantText)
			}
			if events[len(events)-1].GetFinished() == nil {
				t.Error("no BatchFinished")
			}
		})
	}
}

func TestInvariant5_BatchTimeout(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	events := te.run(t, &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{call("a", "write", `{"ms":5000}`), call("b", "write", `{}`)},
		Options: &toolwirev1.BatchOptions{Timeout: durationpb.New(80 * time.Millisecond)},
	})
	got := results(t, events)
	if got["a"].GetErrorKind() != kindTimeout || got["b"].GetErrorKind() != kindTimeout {
		t.Errorf("kinds %v %v, want TIMEOUT for both", got["a"].GetErrorKind(), got["b"].GetErrorKind())
	}
	if !strings.Contains(text(got["b"]), "before the call started") {
		t.Errorf("b: %q, want it to say it never started", text(got["b"]))
	}
}

// TestInvariant5_IdleTimeoutExtendedByProgressUpToTheDeadline: the idle
// timeout is 50 ticks of the ticker tool (20 ms), so only a stall of a whole
// second in reporting, not a loaded machine's scheduling under -race (a
// 200 ms timeout flaked at load 8), could make a reporting call idle out.
func TestInvariant5_IdleTimeoutExtendedByProgressUpToTheDeadline(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{IdleTimeout: time.Second})
	events := te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("reports", "ticker", `{"ms":1500}`), // reports every 20ms: runs past the idle timeout
		call("silent", "write", `{"ms":60000}`),  // reports nothing: idles out
		{CallId: "capped", Name: "ticker", Arguments: `{"ms":60000}`, Timeout: durationpb.New(1200 * time.Millisecond)},
	}})
	got := results(t, events)
	if r := got["reports"]; r.GetIsError() {
		t.Errorf("reporting call failed: %v %q", r.GetErrorKind(), text(r))
	}
	if r := got["silent"]; r.GetErrorKind() != kindTimeout || !strings.Contains(text(r), "no progress for 1s") {
		t.Errorf("silent call: %v %q, want an idle TIMEOUT", r.GetErrorKind(), text(r))
	}
	if r := got["capped"]; r.GetErrorKind() != kindTimeout || !strings.Contains(text(r), "timed out after 1.2s") {
		t.Errorf("capped call: %v %q, want the hard cap", r.GetErrorKind(), text(r))
	}
}

func TestInvariant6_CancellationOutranksTheToolsError(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	events := te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		{CallId: "x", Name: "own_error", Timeout: durationpb.New(30 * time.Millisecond)},
	}})
	r := results(t, events)["x"]
	if r.GetErrorKind() != kindTimeout || strings.Contains(text(r), "my own error") {
		t.Errorf("result %v %q, want TIMEOUT without the tool's own error", r.GetErrorKind(), text(r))
	}
}

func TestInvariant6_ToolIgnoringCancellationIsAbandoned(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		safe map[string]bool
		lane bool // the stubborn call shares a parallel lane
	}{
		{"alone in its lane", nil, false},
		{"in a parallel lane", map[string]bool{"stubborn": true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			te := newTestBed(t, Config{AbandonGrace: 50 * time.Millisecond, Safe: tt.safe})
			events := te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
				{CallId: "x", Name: "stubborn", Timeout: durationpb.New(30 * time.Millisecond)},
				call("r", "read", `{"ms":1}`),
				call("w", "write", `{"ms":1}`),
			}})
			if got := len(events[0].GetAccepted().GetLanes()); (got == 2) != tt.lane {
				t.Fatalf("plan has %d lanes; stubborn in a parallel lane: %v", got, tt.lane)
			}
			got := results(t, events)
			if r := got["x"]; r.GetErrorKind() != kindTimeout || !strings.Contains(text(r), "abandoned") {
				t.Errorf("result %v %q, want TIMEOUT saying the tool was abandoned", r.GetErrorKind(), text(r))
			}
			for _, id := range []string{"r", "w"} {
				if got[id].GetIsError() {
					t.Errorf("call %s after the abandoned one failed: %q", id, text(got[id]))
				}
			}
			if events[len(events)-1].GetFinished() == nil {
				t.Error("no BatchFinished")
			}
			if n := te.e.Stats().Abandoned; n != 1 {
				t.Errorf("Abandoned() = %d, want 1", n)
			}
		})
	}
}

func TestInvariant6_ShutdownCancelsCallsWhichStillGetResults(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	stream := startBatch(t, context.Background(), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("a", "write", `{"ms":10000}`), call("b", "write", `{}`),
	}})
	te.e.CancelCalls()
	got, err := drain(stream)
	if err != nil {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
	res := results(t, got)
	for _, id := range []string{"a", "b"} {
		if r := res[id]; r.GetErrorKind() != kindCancelled || !strings.Contains(text(r), "shutting down") {
			t.Errorf("%s: %v %q, want CANCELLED by shutdown", id, r.GetErrorKind(), text(r))
		}
	}
	if len(got) == 0 || got[len(got)-1].GetFinished() == nil {
		t.Error("stream did not end with BatchFinished")
	}
}

func TestInvariant7_OutputIsCappedWithAMarkerAndTheFullSize(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{MaxResultBytes: 1000})
	tests := []struct {
		name          string
		n             int
		wantTruncated bool
		wantBlocks    int
	}{
		{"fits", 100, false, 2},
		{"image left out", 800, true, 2},
		{"text cut, the rest left out", 5000, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := results(t, te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("x", "big", fmt.Sprintf(`{"n":%d}`, tt.n))}}))["x"]
			wantSize := uint64(2*tt.n + len(`{"n":111}`))
			if r.GetTruncated() != tt.wantTruncated || r.GetOriginalSize() != wantSize {
				t.Errorf("truncated %v size %d, want %v %d", r.GetTruncated(), r.GetOriginalSize(), tt.wantTruncated, wantSize)
			}
			size := len(r.GetStructuredContent()) + len(r.GetDetails())
			for _, c := range r.GetContent() {
				size += len(c.GetText().GetText()) + len(c.GetImage().GetData())
			}
			if !tt.wantTruncated {
				if size != int(wantSize) || len(r.GetContent()) != tt.wantBlocks {
					t.Errorf("untruncated result has %d bytes in %d blocks", size, len(r.GetContent()))
				}
				return
			}
			marker := r.GetContent()[len(r.GetContent())-1].GetText().GetText()
			if !strings.Contains(marker, "[output truncated") || !strings.Contains(marker, fmt.Sprint(wantSize)) {
				t.Errorf("last block %q, want a truncation marker with the full size", marker)
			}
			if size-len(marker) > 1000 {
				t.Errorf("kept %d bytes besides the marker, over the 1000-byte cap", size-len(marker))
			}
		})
	}
}

func TestInvariant9_SlowReaderGetsBackpressure(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{EventBuffer: 4})
	const n, size = 2000, 32 << 10 // 64 MB of output in all
	// The sink is a client that reads nothing until reading is closed.
	reading := make(chan struct{})
	got := 0
	sink := SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
		<-reading
		if ev.GetProgress() != nil {
			got++ // Run sends from one goroutine
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		done <- te.e.Run(context.Background(), te.reg.Snapshot(), calls(call("x", "chatty", fmt.Sprintf(`{"n":%d,"size":%d}`, n, size))), sink)
	}()
	// Read nothing until the tool is stuck: its reports must stop well short
	// of n, because nothing buffers them without bound.
	var stuck int64
	waitFor(t, func() bool {
		before := te.state.reports.Load()
		time.Sleep(100 * time.Millisecond)
		stuck = te.state.reports.Load()
		return stuck > 0 && stuck == before
	})
	if stuck >= n/2 {
		t.Fatalf("the tool made %d of %d reports with nobody reading", stuck, n)
	}
	close(reading)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("received %d progress events, want all %d once reading resumed", got, n)
	}
}

func TestCallsSeeTheirSessionAndIDs(t *testing.T) {
	t.Parallel()
	whoami := tools.Tool{Name: "whoami", Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
		return tools.Text(c.SessionID + "/" + c.ID + "/" + c.Name + "/" + string(c.Arguments)), nil
	}}
	te := newTestBed(t, Config{}, whoami)
	r := results(t, te.run(t, &toolwirev1.ExecuteBatchRequest{SessionId: "s1", Calls: []*toolwirev1.ToolCall{call("c9", "whoami", ` {"a":1} `)}}))["c9"]
	if got := text(r); got != `s1/c9/whoami/{"a":1}` {
		t.Errorf("the tool saw %q, want s1/c9/whoami/{\"a\":1}", got)
	}
}

// TestTimeoutOfACallThatChangesThings: a call that timed out while it ran
// may have done what it was asked; for a tool that is neither read-only
// nor idempotent the result says so, since a model told only "timed out"
// sends it again.
func TestTimeoutOfACallThatChangesThings(t *testing.T) {
	t.Parallel()
	block := func(ctx context.Context, _ *tools.Call) (*tools.Result, error) { <-ctx.Done(); return nil, ctx.Err() }
	te := newTestBed(t, Config{},
		tools.Tool{Name: "charge", InputSchema: []byte(`{"type":"object"}`), Handler: block},
		tools.Tool{Name: "lookup", InputSchema: []byte(`{"type":"object"}`), Handler: block, Annotations: tools.Annotations{ReadOnly: true}},
		tools.Tool{Name: "put", InputSchema: []byte(`{"type":"object"}`), Handler: block, Annotations: tools.Annotations{Idempotent: true}})
	timeout := durationpb.New(50 * time.Millisecond)
	got := results(t, te.run(t, calls(
		&toolwirev1.ToolCall{CallId: "charge", Name: "charge", Timeout: timeout},
		&toolwirev1.ToolCall{CallId: "lookup", Name: "lookup", Timeout: timeout},
		&toolwirev1.ToolCall{CallId: "put", Name: "put", Timeout: timeout})))
	const mayHave = "it was running, so it may have done some or all of what it was asked: check before calling it again"
	for id, want := range map[string]bool{"charge": true, "lookup": false, "put": false} {
		r := got[id]
		if r.GetErrorKind() != kindTimeout || !strings.Contains(text(r), "timed out after 50ms") || strings.Contains(text(r), mayHave) != want {
			t.Errorf("%s: %v %q; want TIMEOUT, saying it may have been done: %v", id, r.GetErrorKind(), text(r), want)
		}
	}
}
