package grpcserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/otelobserver"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
)

// waitTimeout bounds waits for something that must happen; it only fails a
// test that would otherwise hang.
const waitTimeout = 20 * time.Second

// observed is a server whose spans, metrics and logs a test reads, reached
// over bufconn through Serve (and so through its otelgrpc stats handler) by
// an instrumented client with its own tracer provider, as an agent process
// would be.
type observed struct {
	client       *client.Client
	clientTP     *sdktrace.TracerProvider
	clientSpans  *tracetest.SpanRecorder
	serverSpans  *tracetest.SpanRecorder
	metrics      *sdkmetric.ManualReader
	log          *logbuf.Buffer
	toolSpanCtxs sync.Map // call ID → the span context its tool's ctx carried
}

// newObserved serves the tools the telemetry tests observe on an engine
// made with ec, recording spans and metrics, and call content when
// traceContent.
func newObserved(t *testing.T, ec engine.Config, traceContent bool, copts ...client.Option) *observed {
	t.Helper()
	o := &observed{
		clientSpans: tracetest.NewSpanRecorder(),
		serverSpans: tracetest.NewSpanRecorder(),
		metrics:     sdkmetric.NewManualReader(),
		log:         &logbuf.Buffer{},
	}
	o.clientTP = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.clientSpans))
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.serverSpans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.metrics))
	release := make(chan struct{})
	var stubborn sync.WaitGroup
	probe := tools.Tool{
		Name: "probe", Description: "reports the span its context carries",
		Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			o.toolSpanCtxs.Store(call.ID, trace.SpanContextFromContext(ctx))
			return tools.Text("probed"), nil
		},
	}
	stubbornTool := tools.Tool{
		Name: "stubborn", Description: "ignores cancellation",
		Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			stubborn.Add(1)
			defer stubborn.Done()
			<-release
			return tools.Text("too late"), nil
		},
	}
	panicky := tools.Tool{
		Name: "boom", Description: "panics",
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) { panic("kaboom") },
	}
	reg, err := tools.NewRegistry(append(diag.Tools(), probe, stubbornTool, panicky)...)
	if err != nil {
		t.Fatal(err)
	}
	ec.DrainTimeout = time.Second
	if ec.AbandonGrace == 0 {
		ec.AbandonGrace = time.Second
	}
	eng := engine.New(ec, engine.Deps{
		Observer: otelobserver.New(serverTP, mp, traceContent),
		Logger:   slog.New(slog.NewJSONHandler(o.log, nil)),
	})
	t.Cleanup(eng.Close) // after the server's cleanup below
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{TracerProvider: serverTP, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	o.client, err = client.New("passthrough:///bufconn", append([]client.Option{
		client.WithTracerProvider(o.clientTP),
		client.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })),
	}, copts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		o.client.Close()
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
		stubborn.Wait()
	})
	return o
}

// run executes a batch inside a client-side parent span (an agent's turn)
// and returns the collected batch and the parent's span context.
func (o *observed) run(t *testing.T, req *toolwirev1.ExecuteBatchRequest) (*client.Batch, trace.SpanContext) {
	t.Helper()
	ctx, parent := o.clientTP.Tracer("agent").Start(context.Background(), "agent turn")
	b, err := client.Collect(o.client.ExecuteBatch(ctx, req))
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	return b, parent.SpanContext()
}

// serverSpan waits until the server has ended a span named name, then
// returns the ended spans: the RPC's span ends just after the client has
// seen the stream's end.
func (o *observed) waitSpans(t *testing.T, rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		spans := rec.Ended()
		if slices.ContainsFunc(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name }) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q ended", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func call(id, name, args string) *toolwirev1.ToolCall {
	return &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: args}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func only(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q; want 1", len(found), name)
	}
	return found[0]
}

const executeBatchRPC = "toolwire.v1.ToolService/ExecuteBatch"

// TestTraceLinksClientServerBatchAndCalls follows one batch's trace from the
// agent's span through the client's and the server's RPC spans to the batch
// span and one execute_tool span per call, over a real gRPC connection.
func TestTraceLinksClientServerBatchAndCalls(t *testing.T) {
	t.Parallel()
	o := newObserved(t, engine.Config{}, false)
	b, agent := o.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("p1", "probe", ""),
		call("e1", "echo", `{"text":"hi"}`),
		call("f1", "fail", `{"message":"no"}`),
		call("u1", "nope", ""),
		call("i1", "echo", `{"text":7}`),
		{CallId: "t1", Name: "sleep", Arguments: `{"ms":60000}`, Timeout: durationpb.New(time.Millisecond)},
	}})

	clientSpans := o.waitSpans(t, o.clientSpans, executeBatchRPC)
	clientRPC := only(t, clientSpans, executeBatchRPC)
	if clientRPC.SpanKind() != trace.SpanKindClient || clientRPC.Parent().SpanID() != agent.SpanID() {
		t.Errorf("client RPC span: kind %v, parent %v; want CLIENT under the agent's span %v", clientRPC.SpanKind(), clientRPC.Parent().SpanID(), agent.SpanID())
	}
	spans := o.waitSpans(t, o.serverSpans, executeBatchRPC)
	serverRPC := only(t, spans, executeBatchRPC)
	if serverRPC.SpanKind() != trace.SpanKindServer || serverRPC.Parent().SpanID() != clientRPC.SpanContext().SpanID() ||
		!serverRPC.Parent().IsRemote() || serverRPC.SpanContext().TraceID() != agent.TraceID() {
		t.Errorf("server RPC span: kind %v, parent %v (remote %v), trace %v; want SERVER under the client's span %v in trace %v",
			serverRPC.SpanKind(), serverRPC.Parent().SpanID(), serverRPC.Parent().IsRemote(), serverRPC.SpanContext().TraceID(),
			clientRPC.SpanContext().SpanID(), agent.TraceID())
	}

	batch := only(t, spans, "execute_batch")
	if batch.SpanKind() != trace.SpanKindInternal || batch.Parent().SpanID() != serverRPC.SpanContext().SpanID() {
		t.Errorf("batch span: kind %v, parent %v; want INTERNAL under the server's RPC span", batch.SpanKind(), batch.Parent().SpanID())
	}
	ba := attrs(batch)
	if got := ba["toolwire.batch.id"].AsString(); got != b.Accepted.GetBatchId() {
		t.Errorf("toolwire.batch.id %q; want the accepted batch ID %q", got, b.Accepted.GetBatchId())
	}
	// Read-only calls share parallel lanes (probe and echo, then echo and
	// sleep); fail and the unknown tool are lanes of their own.
	if got, want := ba["toolwire.batch.lane_sizes"].AsInt64Slice(), []int64{2, 1, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("lane sizes %v; want %v", got, want)
	}
	if got, want := ba["toolwire.batch.lane_parallel"].AsBoolSlice(), []bool{true, false, false, true}; !slices.Equal(got, want) {
		t.Errorf("lane parallel %v; want %v", got, want)
	}
	if ba["toolwire.batch.lanes"].AsInt64() != 4 || ba["toolwire.batch.calls"].AsInt64() != 6 ||
		ba["toolwire.batch.succeeded"].AsInt64() != 2 || ba["toolwire.batch.failed"].AsInt64() != 4 {
		t.Errorf("batch attributes %v", ba)
	}
	var lanes int
	for _, ev := range batch.Events() {
		if ev.Name == "lane" {
			lanes++
		}
	}
	if lanes != 4 {
		t.Errorf("%d lane events; want 4", lanes)
	}

	tests := []struct {
		id, tool, errorType string
		ran                 bool
	}{
		{"p1", "probe", "", true},
		{"e1", "echo", "", true},
		{"f1", "fail", "tool_error", true},
		{"u1", "nope", "unknown_tool", false},
		{"i1", "echo", "invalid_arguments", false},
		{"t1", "sleep", "timeout", true},
	}
	callSpans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), "execute_tool ") {
			callSpans[attrs(s)["gen_ai.tool.call.id"].AsString()] = s
		}
	}
	if len(callSpans) != len(tests) {
		t.Errorf("%d execute_tool spans; want one per call, %d", len(callSpans), len(tests))
	}
	for _, tt := range tests {
		s, ok := callSpans[tt.id]
		if !ok {
			t.Errorf("call %s: no span", tt.id)
			continue
		}
		a := attrs(s)
		if s.Name() != "execute_tool "+tt.tool || s.SpanKind() != trace.SpanKindInternal || s.Parent().SpanID() != batch.SpanContext().SpanID() {
			t.Errorf("call %s: span %q kind %v parent %v; want %q, INTERNAL, under the batch span", tt.id, s.Name(), s.SpanKind(), s.Parent().SpanID(), "execute_tool "+tt.tool)
		}
		if a["gen_ai.operation.name"].AsString() != "execute_tool" || a["gen_ai.tool.name"].AsString() != tt.tool || a["toolwire.call.ran"].AsBool() != tt.ran {
			t.Errorf("call %s: attributes %v", tt.id, a)
		}
		if got := a["error.type"].AsString(); got != tt.errorType {
			t.Errorf("call %s: error.type %q; want %q", tt.id, got, tt.errorType)
		}
		wantStatus := codes.Unset
		if tt.errorType != "" {
			wantStatus = codes.Error
		}
		if s.Status().Code != wantStatus {
			t.Errorf("call %s: status %v; want %v", tt.id, s.Status().Code, wantStatus)
		}
		if _, ok := a["gen_ai.tool.call.arguments"]; ok {
			t.Errorf("call %s: arguments recorded without TraceContent", tt.id)
		}
		if _, ok := a["gen_ai.tool.call.result"]; ok {
			t.Errorf("call %s: result recorded without TraceContent", tt.id)
		}
	}
	if d := attrs(callSpans["e1"])["gen_ai.tool.description"].AsString(); d != "Returns the given text unchanged." {
		t.Errorf("echo's gen_ai.tool.description %q", d)
	}

	// The tool's context carries its call's span, so what it calls continues
	// the trace.
	v, ok := o.toolSpanCtxs.Load("p1")
	if !ok {
		t.Fatal("the probe tool did not run")
	}
	if sc := v.(trace.SpanContext); sc.SpanID() != callSpans["p1"].SpanContext().SpanID() || sc.TraceID() != agent.TraceID() {
		t.Errorf("the tool's context carries span %v; want its call's span %v", sc.SpanID(), callSpans["p1"].SpanContext().SpanID())
	}
}

// TestTraceContentIsOptIn records arguments and results only with
// TraceContent.
func TestTraceContentIsOptIn(t *testing.T) {
	t.Parallel()
	o := newObserved(t, engine.Config{}, true)
	o.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("e1", "echo", `{"text":"secret"}`),
		call("f1", "fail", `{"message":"denied"}`),
	}})
	spans := o.waitSpans(t, o.serverSpans, executeBatchRPC)
	for name, want := range map[string][2]string{
		"execute_tool echo": {`{"text":"secret"}`, `{"text":"secret"}`},
		"execute_tool fail": {`{"message":"denied"}`, "denied"},
	} {
		a := attrs(only(t, spans, name))
		if got := a["gen_ai.tool.call.arguments"].AsString(); got != want[0] {
			t.Errorf("%s: arguments %q; want %q", name, got, want[0])
		}
		if got := a["gen_ai.tool.call.result"].AsString(); got != want[1] {
			t.Errorf("%s: result %q; want %q", name, got, want[1])
		}
	}
}

// TestMetrics checks the instruments' names, units and attributes after a
// batch with successes, failures of several kinds and an abandoned tool.
func TestMetrics(t *testing.T) {
	t.Parallel()
	o := newObserved(t, engine.Config{AbandonGrace: time.Millisecond}, false)
	o.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("e1", "echo", `{"text":"a"}`),
		call("e2", "echo", `{"text":"b"}`),
		call("f1", "fail", `{"message":"no"}`),
		call("u1", "invented_by_the_model", ""),
		{CallId: "x1", Name: "stubborn", Timeout: durationpb.New(time.Millisecond)},
	}})
	var rm metricdata.ResourceMetrics
	if err := o.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == engine.ScopeName {
			for _, m := range sm.Metrics {
				got[m.Name] = m
			}
		}
	}
	key := func(set attribute.Set) string {
		tool, _ := set.Value("gen_ai.tool.name")
		et, _ := set.Value("error.type")
		return tool.AsString() + "/" + et.AsString()
	}

	duration, ok := got["gen_ai.execute_tool.duration"]
	if !ok || duration.Unit != "s" {
		t.Fatalf("gen_ai.execute_tool.duration: %+v; want a histogram in seconds", duration)
	}
	counts := map[string]uint64{}
	for _, dp := range duration.Data.(metricdata.Histogram[float64]).DataPoints {
		counts[key(dp.Attributes)] = dp.Count
		if op, _ := dp.Attributes.Value("gen_ai.operation.name"); op.AsString() != "execute_tool" {
			t.Errorf("duration point without gen_ai.operation.name=execute_tool: %v", dp.Attributes)
		}
	}
	// The unknown tool never ran, so it has no duration.
	if want := map[string]uint64{"echo/": 2, "fail/tool_error": 1, "stubborn/timeout": 1}; !mapsEqual(counts, want) {
		t.Errorf("duration counts %v; want %v", counts, want)
	}

	results := map[string]int64{}
	for _, dp := range got["toolwire.call.results"].Data.(metricdata.Sum[int64]).DataPoints {
		results[key(dp.Attributes)] = dp.Value
	}
	// A name the model invented is counted as _OTHER, not as a new series.
	if want := map[string]int64{"echo/": 2, "fail/tool_error": 1, "_OTHER/unknown_tool": 1, "stubborn/timeout": 1}; !mapsEqual(results, want) {
		t.Errorf("results %v; want %v", results, want)
	}

	var waits uint64
	for _, dp := range got["toolwire.call.queue_wait"].Data.(metricdata.Histogram[float64]).DataPoints {
		waits += dp.Count
	}
	if waits != 4 {
		t.Errorf("%d queue waits; want one per call that ran, 4", waits)
	}
	for _, dp := range got["toolwire.calls.in_flight"].Data.(metricdata.Sum[int64]).DataPoints {
		if dp.Value != 0 {
			t.Errorf("in flight %d for %v after the batch; want 0", dp.Value, dp.Attributes)
		}
	}
	abandoned := got["toolwire.tools.abandoned"].Data.(metricdata.Sum[int64]).DataPoints
	if len(abandoned) != 1 || abandoned[0].Value != 1 || key(abandoned[0].Attributes) != "stubborn/" {
		t.Errorf("abandoned %+v; want 1 for stubborn", abandoned)
	}
	if _, ok := got["toolwire.call.replays"]; ok {
		t.Error("replays recorded without a replayed result")
	}
}

func mapsEqual[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestLogLinesCarryTraceAndCallIDs checks that the server's log line about a
// call (here a tool's panic) names the call's trace, span, batch and call.
func TestLogLinesCarryTraceAndCallIDs(t *testing.T) {
	t.Parallel()
	o := newObserved(t, engine.Config{}, false)
	b, agent := o.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("b1", "boom", "")}})
	spans := o.waitSpans(t, o.serverSpans, executeBatchRPC)
	callSpan := only(t, spans, "execute_tool boom")
	var rec map[string]any
	for line := range strings.Lines(o.log.String()) {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == "tool panicked" {
			rec = r
		}
	}
	if rec == nil {
		t.Fatalf("no panic log line:\n%s", o.log)
	}
	want := map[string]string{
		"trace_id": agent.TraceID().String(),
		"span_id":  callSpan.SpanContext().SpanID().String(),
		"batch_id": b.Accepted.GetBatchId(),
		"call_id":  "b1",
		"tool":     "boom",
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("log field %s = %v; want %q", k, rec[k], v)
		}
	}
}

// TestClientWithoutTelemetry checks that the client's option leaves out its
// handler: no client span, and no trace context reaches the server, whose
// RPC span starts a trace of its own.
func TestClientWithoutTelemetry(t *testing.T) {
	t.Parallel()
	o := newObserved(t, engine.Config{}, false, client.WithoutTelemetry())
	_, agent := o.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("e1", "echo", `{"text":"hi"}`)}})
	spans := o.waitSpans(t, o.serverSpans, executeBatchRPC)
	rpc := only(t, spans, executeBatchRPC)
	if rpc.Parent().IsValid() || rpc.SpanContext().TraceID() == agent.TraceID() {
		t.Errorf("server RPC span has parent %v in trace %v; want a new root", rpc.Parent().SpanID(), rpc.SpanContext().TraceID())
	}
	for _, s := range o.clientSpans.Ended() {
		if s.Name() == executeBatchRPC {
			t.Errorf("client span %q made without telemetry", s.Name())
		}
	}
}
