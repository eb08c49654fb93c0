package engine

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// ScopeName is the instrumentation scope of toolwire's spans and metrics.
const ScopeName = "github.com/toolwire/toolwire/service"

// Attribute keys. The gen_ai.* and error.type keys are OpenTelemetry's GenAI
// semantic conventions (execute_tool spans); toolwire.* are toolwire's own.
const (
	attrOperationName = attribute.Key("gen_ai.operation.name")
	attrToolName      = attribute.Key("gen_ai.tool.name")
	attrToolCallID    = attribute.Key("gen_ai.tool.call.id")
	attrToolDesc      = attribute.Key("gen_ai.tool.description")
	attrToolArgs      = attribute.Key("gen_ai.tool.call.arguments")
	attrToolResult    = attribute.Key("gen_ai.tool.call.result")
	attrErrorType     = attribute.Key("error.type")

	attrBatchID           = attribute.Key("toolwire.batch.id")
	attrBatchCalls        = attribute.Key("toolwire.batch.calls")
	attrBatchLanes        = attribute.Key("toolwire.batch.lanes")
	attrBatchLaneSizes    = attribute.Key("toolwire.batch.lane_sizes")
	attrBatchLaneParallel = attribute.Key("toolwire.batch.lane_parallel")
	attrBatchMaxParallel  = attribute.Key("toolwire.batch.max_parallel")
	attrBatchStopOnError  = attribute.Key("toolwire.batch.stop_on_error")
	attrBatchRevision     = attribute.Key("toolwire.registry.revision")
	attrBatchSucceeded    = attribute.Key("toolwire.batch.succeeded")
	attrBatchFailed       = attribute.Key("toolwire.batch.failed")
	attrBatchSkipped      = attribute.Key("toolwire.batch.skipped")
	attrLaneIndex         = attribute.Key("toolwire.lane.index")
	attrLaneCalls         = attribute.Key("toolwire.lane.calls")
	attrLaneParallel      = attribute.Key("toolwire.lane.parallel")
	attrCallIndex         = attribute.Key("toolwire.call.index")
	attrCallRan           = attribute.Key("toolwire.call.ran")
	attrCallReplayed      = attribute.Key("toolwire.call.replayed")
	attrCallTruncated     = attribute.Key("toolwire.call.truncated")
)

// Span and metric names.
const (
	spanBatch          = "execute_batch"
	spanToolPrefix     = "execute_tool "
	operationExecute   = "execute_tool"
	metricToolDuration = "gen_ai.execute_tool.duration"
	metricInFlight     = "toolwire.calls.in_flight"
	metricQueueWait    = "toolwire.call.queue_wait"
	metricResults      = "toolwire.call.results"
	metricReplays      = "toolwire.call.replays"
	metricAbandoned    = "toolwire.tools.abandoned"
	// otherTool stands for a tool name that is not registered in metrics:
	// models invent names, and each would be a new time series.
	otherTool = "_OTHER"
)

// durationBuckets span a fast in-process tool (a millisecond) to the longest
// call timeout (10 minutes), in seconds.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// internalSpan starts a span of kind INTERNAL; a variable, so starting one
// does not allocate the option.
var internalSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

// telemetry holds a server's tracer and instruments. With the default
// (global, no-op until an SDK is installed) providers every method costs next
// to nothing.
type telemetry struct {
	tracer  trace.Tracer
	content bool // record arguments and results in spans

	// The configured providers; nil (or a global delegate) means
	// OpenTelemetry's globals, looked up again each time: an SDK may be
	// installed after the server was made.
	tp trace.TracerProvider
	mp metric.MeterProvider

	duration  metric.Float64Histogram
	inFlight  metric.Int64UpDownCounter
	queueWait metric.Float64Histogram
	results   metric.Int64Counter
	replays   metric.Int64Counter
	abandoned metric.Int64Counter

	// Attribute sets of measurements, cached per tool and error kind so a
	// call's measurements allocate nothing.
	mu    sync.RWMutex
	attrs map[attrKey]*measureOpts
}

// measureOpts are the options of measurements with one attribute set, as
// slices, because passing a single option to a variadic parameter would
// allocate one each time.
type measureOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

type attrKey struct {
	tool string
	kind toolwirev1.ErrorKind
}

func newTelemetry(cfg *Config) *telemetry {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &telemetry{
		tracer:  tp.Tracer(ScopeName),
		content: cfg.TraceContent,
		tp:      cfg.TracerProvider,
		mp:      cfg.MeterProvider,
		attrs:   make(map[attrKey]*measureOpts),
	}
	m := mp.Meter(ScopeName)
	var errs [6]error
	t.duration, errs[0] = m.Float64Histogram(metricToolDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of tool executions, by tool and error type."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	t.inFlight, errs[1] = m.Int64UpDownCounter(metricInFlight, metric.WithUnit("{call}"),
		metric.WithDescription("Calls whose tool is running and whose result is not yet sent."))
	t.queueWait, errs[2] = m.Float64Histogram(metricQueueWait, metric.WithUnit("s"),
		metric.WithDescription("Time from a batch's acceptance until one of its calls started running."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	t.results, errs[3] = m.Int64Counter(metricResults, metric.WithUnit("{result}"),
		metric.WithDescription("Call results, by tool and error type (absent on success)."))
	t.replays, errs[4] = m.Int64Counter(metricReplays, metric.WithUnit("{result}"),
		metric.WithDescription("Call results replayed from the idempotency store instead of run."))
	t.abandoned, errs[5] = m.Int64Counter(metricAbandoned, metric.WithUnit("{call}"),
		metric.WithDescription("Tools abandoned for ignoring their cancellation."))
	// Errors come only from invalid names or options, constants here; the
	// SDK returns a working no-op instrument even then.
	if err := errors.Join(errs[:]...); err != nil {
		otel.Handle(err)
	}
	return t
}

// tracing reports whether the server's tracer provider may record spans.
func (t *telemetry) tracing() bool {
	tp := t.tp
	if tp == nil || isGlobalDelegate(tp) {
		tp = otel.GetTracerProvider()
	}
	return !isNoop(tp)
}

// metering reports whether the server's meter provider may record.
func (t *telemetry) metering() bool {
	mp := t.mp
	if mp == nil || isGlobalDelegate(mp) {
		mp = otel.GetMeterProvider()
	}
	return !isNoop(mp)
}

// globalPkg holds OpenTelemetry's global delegates: the providers that
// otel.GetTracerProvider and otel.GetMeterProvider return until an SDK is
// installed (then they return the SDK's, and the delegates forward to it).
const globalPkg = "go.opentelemetry.io/otel/internal/global"

func isGlobalDelegate(p any) bool { return pkgOf(p) == globalPkg }

// isNoop reports whether provider p records nothing: a global delegate with
// no SDK behind it, or one of OpenTelemetry's no-op providers.
func isNoop(p any) bool {
	switch pkgOf(p) {
	case globalPkg, "go.opentelemetry.io/otel/trace/noop", "go.opentelemetry.io/otel/metric/noop":
		return true
	case "go.opentelemetry.io/otel/trace":
		return reflect.TypeOf(p).Name() == "noopTracerProvider" // trace.NewNoopTracerProvider's
	}
	return p == nil
}

// pkgOf returns the import path of the package that defines p's type.
func pkgOf(p any) string {
	t := reflect.TypeOf(p)
	if t == nil {
		return ""
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath()
}

// measure returns the measurement options for a tool and error kind.
func (t *telemetry) measure(tool string, kind toolwirev1.ErrorKind) *measureOpts {
	k := attrKey{tool, kind}
	t.mu.RLock()
	opt, ok := t.attrs[k]
	t.mu.RUnlock()
	if ok {
		return opt
	}
	kvs := []attribute.KeyValue{attrOperationName.String(operationExecute), attrToolName.String(tool)}
	if kind != toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED {
		kvs = append(kvs, attrErrorType.String(errorType(kind)))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kvs...))
	opt = &measureOpts{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	t.mu.Lock()
	t.attrs[k] = opt
	t.mu.Unlock()
	return opt
}

// errorTypes maps error kinds to error.type values: the enum's name in lower
// case without its prefix, such as "timeout" or "tool_error".
var errorTypes = func() map[toolwirev1.ErrorKind]string {
	m := make(map[toolwirev1.ErrorKind]string, len(toolwirev1.ErrorKind_name))
	for v, name := range toolwirev1.ErrorKind_name {
		m[toolwirev1.ErrorKind(v)] = strings.ToLower(strings.TrimPrefix(name, "ERROR_KIND_"))
	}
	return m
}()

// errorType is the error.type of a failed result of the given kind.
func errorType(kind toolwirev1.ErrorKind) string {
	if kind == toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED {
		return "_OTHER" // a failure without a kind: the convention's fallback
	}
	if s, ok := errorTypes[kind]; ok {
		return s
	}
	return "_OTHER"
}

// batchTel is the telemetry state of one batch: its span and, per call, the
// call's span. It also identifies the batch and its calls in log lines (see
// LogHandler).
type batchTel struct {
	span    trace.Span // nil when the tracer provider records nothing
	metrics bool       // the meter provider may record
	scope   logScope   // the batch's, for its context
}

// callTel is the telemetry state of one call.
type callTel struct {
	span     trace.Span // nil until the call is reached, or when not recording
	scope    logScope
	ran      bool // the tool was invoked
	inFlight bool // counted in toolwire.calls.in_flight until its result
}

// logScope is what LogHandler adds to a log line about a batch or a call.
type logScope struct {
	b *batch
	i int // the call's index; -1 for the batch itself
}

type logScopeKey struct{}

// startTelemetry starts the batch's span, a child of the RPC's, and returns
// ctx carrying it. Call it once the batch is admitted. When neither
// provider records (no SDK installed), spans and measurements are skipped
// altogether, not made and dropped: ctx keeps the client's span context, so
// tools still continue its trace.
func (b *batch) startTelemetry(ctx context.Context) context.Context {
	tel := b.e.tel
	b.tel.scope = logScope{b: b, i: -1}
	b.tel.metrics = tel.metering()
	ctx = context.WithValue(ctx, logScopeKey{}, &b.tel.scope)
	if !tel.tracing() {
		return ctx
	}
	ctx, b.tel.span = tel.tracer.Start(ctx, spanBatch, internalSpan...)
	if !b.tel.span.IsRecording() {
		return ctx
	}
	sizes := make([]int64, len(b.lanes))
	parallel := make([]bool, len(b.lanes))
	for i, l := range b.lanes {
		sizes[i], parallel[i] = int64(len(l.Calls)), l.Parallel
	}
	b.tel.span.SetAttributes(
		attrBatchID.String(b.id),
		attrBatchCalls.Int(len(b.req.GetCalls())),
		attrBatchLanes.Int(len(b.lanes)),
		attrBatchLaneSizes.Int64Slice(sizes),
		attrBatchLaneParallel.BoolSlice(parallel),
		attrBatchMaxParallel.Int(b.parallel),
		attrBatchStopOnError.Bool(b.req.GetOptions().GetStopOnError()),
		attrBatchRevision.String(b.snap.Revision()),
	)
	return ctx
}

// laneStarted marks a lane's start on the batch's span.
func (b *batch) laneStarted(li int) {
	if b.tel.span == nil || !b.tel.span.IsRecording() {
		return
	}
	l := b.lanes[li]
	b.tel.span.AddEvent("lane", trace.WithAttributes(
		attrLaneIndex.Int(li), attrLaneCalls.Int(len(l.Calls)), attrLaneParallel.Bool(l.Parallel)))
}

// endTelemetry ends the batch's span once every call has its result; err is
// the RPC's error.
func (b *batch) endTelemetry(err error) {
	span := b.tel.span
	if span == nil {
		return
	}
	if span.IsRecording() {
		var ok, failed, skipped int
		for i := range b.calls {
			r := &b.calls[i].ended
			switch {
			case !r.ended:
			case r.kind == toolwirev1.ErrorKind_ERROR_KIND_SKIPPED:
				skipped++
			case r.isError:
				failed++
			default:
				ok++
			}
		}
		span.SetAttributes(attrBatchSucceeded.Int(ok), attrBatchFailed.Int(failed), attrBatchSkipped.Int(skipped))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// startCallSpan starts call i's span, a child of the batch's, and returns ctx
// carrying it, so the tool's own outgoing requests (HTTP, MCP) continue the
// trace. Call spans are made only when the batch's span records: a trace
// that is not sampled costs nothing per call.
func (b *batch) startCallSpan(ctx context.Context, lane, i int) context.Context {
	ct := &b.calls[i].tel
	ct.scope = logScope{b: b, i: i}
	ctx = context.WithValue(ctx, logScopeKey{}, &ct.scope)
	if b.tel.span == nil || !b.tel.span.IsRecording() {
		return ctx
	}
	call := b.req.GetCalls()[i]
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs,
		attrOperationName.String(operationExecute),
		attrToolName.String(call.GetName()),
		attrToolCallID.String(call.GetCallId()),
		attrCallIndex.Int(i),
		attrLaneIndex.Int(lane))
	if t := b.calls[i].tool; t != nil && t.Description != "" {
		attrs = append(attrs, attrToolDesc.String(t.Description))
	}
	if b.e.tel.content {
		attrs = append(attrs, attrToolArgs.String(call.GetArguments()))
	}
	ctx, ct.span = b.e.tel.tracer.Start(ctx, spanToolPrefix+call.GetName(),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx
}

// callRunning records that call i's tool is about to be invoked.
func (b *batch) callRunning(i int) {
	tel := b.e.tel
	ct := &b.calls[i].tel
	ct.ran = true
	if !b.tel.metrics {
		return
	}
	ct.inFlight = true
	m := tel.measure(b.metricTool(i), toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED)
	tel.inFlight.Add(context.Background(), 1, m.add...)
	tel.queueWait.Record(context.Background(), time.Since(b.start).Seconds(), m.rec...)
}

// callAbandoned records that call i's tool ignored its cancellation.
func (b *batch) callAbandoned(i int) {
	tel := b.e.tel
	if b.tel.metrics {
		tel.abandoned.Add(context.Background(), 1, tel.measure(b.metricTool(i), toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED).add...)
	}
	if span := b.calls[i].tel.span; span != nil {
		span.AddEvent("abandoned")
	}
}

// endCallTelemetry records call i's result and ends its span. A call that
// never reached startCall (skipped by stop_on_error) gets its span here.
func (b *batch) endCallTelemetry(i int, res *toolwirev1.CallResult) {
	tel := b.e.tel
	ct := &b.calls[i].tel
	tool := b.metricTool(i)
	kind := toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED
	if res.GetIsError() {
		kind = res.GetErrorKind()
		if kind == toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED {
			kind = toolwirev1.ErrorKind(-1) // errorType says _OTHER
		}
	}
	if b.tel.metrics {
		ctx := context.Background()
		m := tel.measure(tool, kind)
		tel.results.Add(ctx, 1, m.add...)
		if ct.ran {
			tel.duration.Record(ctx, res.GetDuration().AsDuration().Seconds(), m.rec...)
		}
		if res.GetReplayed() {
			tel.replays.Add(ctx, 1, tel.measure(tool, toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED).add...)
		}
	}
	if ct.inFlight {
		// Counted down only if counted up: the SDK may have been installed since.
		tel.inFlight.Add(context.Background(), -1, tel.measure(tool, toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED).add...)
	}

	if ct.span == nil && b.tel.span != nil && b.tel.span.IsRecording() {
		b.startCallSpan(trace.ContextWithSpan(context.Background(), b.tel.span), b.laneOf(i), i)
	}
	span := ct.span
	if span == nil {
		return
	}
	span.SetAttributes(attrCallRan.Bool(ct.ran))
	if res.GetReplayed() {
		span.SetAttributes(attrCallReplayed.Bool(true))
	}
	if res.GetTruncated() {
		span.SetAttributes(attrCallTruncated.Bool(true))
	}
	if tel.content {
		span.SetAttributes(attrToolResult.String(resultText(res)))
	}
	if res.GetIsError() {
		et := errorType(kind)
		span.SetAttributes(attrErrorType.String(et))
		span.SetStatus(codes.Error, et)
	}
	span.End()
}

// laneOf returns the index of the lane that holds call i.
func (b *batch) laneOf(i int) int {
	for li, l := range b.lanes {
		if l.Calls[0] <= i && i <= l.Calls[len(l.Calls)-1] {
			return li
		}
	}
	return -1
}

// metricTool is call i's tool name as metrics label it.
func (b *batch) metricTool(i int) string {
	if t := b.calls[i].tool; t != nil {
		return t.Name
	}
	return otherTool
}

// resultText is what gen_ai.tool.call.result records: the structured content
// when there is some, else the text blocks.
func resultText(res *toolwirev1.CallResult) string {
	if s := res.GetStructuredContent(); s != "" {
		return s
	}
	var sb strings.Builder
	for _, c := range res.GetContent() {
		if t := c.GetText(); t != nil {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(t.GetText())
		}
	}
	return sb.String()
}

// Recording reports whether the engine's tracer or meter provider may
// record, so a surface can skip instrumenting its transport when neither
// does.
func (e *Engine) Recording() bool { return e.tel.tracing() || e.tel.metering() }
