// Package otelobserver is the engine's OpenTelemetry: an engine.Observer
// that records a span per batch and an execute_tool span per call (the
// GenAI semantic conventions) and toolwire's metrics, keeping its state in
// the contexts it returns, as grpc-go's stats/opentelemetry does. A
// program passes the providers of the SDK it installed; nothing is looked
// up in OpenTelemetry's globals.
package otelobserver

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/redact"
)

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
	attrEndReason         = attribute.Key("toolwire.stream.end_reason")
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
	metricStreamsEnded = "toolwire.streams.ended"
	metricBuffered     = "toolwire.buffered"
	// otherTool stands for a tool name that is not registered in metrics:
	// models invent names, and each would be a new time series.
	otherTool = "_OTHER"
)

// MaxContentBytes bounds each of gen_ai.tool.call.arguments and
// gen_ai.tool.call.result, recorded with trace_content: a longer value is
// cut at a rune's boundary and marked with its size. A span holds what it
// records until it is exported, and the SDK keeps up to 2,048 of them
// waiting for a collector; arguments of a megabyte each would hold
// gigabytes, and make export requests a collector refuses.
const MaxContentBytes = 8 << 10

// durationBuckets span a fast in-process tool (a millisecond) to the longest
// call timeout (10 minutes), in seconds.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// internalSpan starts a span of kind INTERNAL; a variable, so starting one
// does not allocate the option.
var internalSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

// otelTelemetry is the OpenTelemetry Observer: a tracer and instruments.
type otelTelemetry struct {
	tracer  trace.Tracer  // nil: no tracer provider, no spans
	metrics bool          // a meter provider was given: measure
	content bool          // record arguments and results in spans
	redact  redact.Fields // what content leaves out of them
	meter   metric.Meter

	duration  metric.Float64Histogram
	inFlight  metric.Int64UpDownCounter
	queueWait metric.Float64Histogram
	results   metric.Int64Counter
	replays   metric.Int64Counter
	abandoned metric.Int64Counter
	ended     metric.Int64Counter

	// Attribute sets of measurements, cached per tool and error kind so a
	// call's measurements allocate nothing; at most maxAttrSets.
	mu    sync.RWMutex
	attrs map[attrKey]*measureOpts
}

// maxAttrSets bounds the cached attribute sets. Tools come and go (an MCP
// server's list changes, a config is reloaded) and each name called kept
// its sets for good: past the bound the cache starts again, and the tools
// called since fill it.
const maxAttrSets = 4096

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

// New returns the Observer that records an engine's spans on tp
// (one per batch, one execute_tool span per call, with the GenAI semantic
// conventions) and its metrics on mp (gen_ai.execute_tool.duration and
// toolwire's own), with content recording each call's arguments and result
// in its span, the values of secret fields redacted as the audit trail's
// are (redact.SecretNames, and the names in more: audit_redact). A nil
// provider, or OpenTelemetry's no-op one
// (trace/noop, metric/noop), records nothing of its signal; with neither
// recording, New returns nil: no telemetry at all. The program
// passes the providers of the SDK it installed; nothing is looked up in
// OpenTelemetry's globals.
func New(tp trace.TracerProvider, mp metric.MeterProvider, content bool, more ...string) engine.Observer {
	if _, ok := tp.(tracenoop.TracerProvider); ok {
		tp = nil
	}
	if _, ok := mp.(metricnoop.MeterProvider); ok {
		mp = nil
	}
	if tp == nil && mp == nil {
		return nil
	}
	t := &otelTelemetry{content: content, attrs: make(map[attrKey]*measureOpts)}
	if content {
		t.redact = redact.NewFields(more)
	}
	if tp != nil {
		t.tracer = tp.Tracer(engine.ScopeName)
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	} else {
		t.metrics = true
	}
	m := mp.Meter(engine.ScopeName)
	t.meter = m
	var errs [7]error
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
	t.ended, errs[6] = m.Int64Counter(metricStreamsEnded, metric.WithUnit("{stream}"),
		metric.WithDescription("Streams the server ended because their client was not reading, by the setting that ended them (send_timeout, max_buffered_bytes)."))
	// Errors come only from invalid names or options, constants here; the
	// SDK returns a working no-op instrument even then.
	if err := errors.Join(errs[:]...); err != nil {
		otel.Handle(err)
	}
	return t
}

// measure returns the measurement options for a tool and error kind.
func (t *otelTelemetry) measure(tool string, kind toolwirev1.ErrorKind) *measureOpts {
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
	if len(t.attrs) >= maxAttrSets {
		clear(t.attrs)
	}
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

// batchTel is what the OpenTelemetry observer keeps of a batch: the
// context BatchStarted returns is one, so keeping it costs no more than
// the context it returns anyway.
type batchTel struct {
	context.Context
	span trace.Span // nil without a tracer provider
}

// callTel is what it keeps of a call, likewise the context CallStarted
// returns.
type callTel struct {
	context.Context
	span     trace.Span // nil when not recording
	ran      bool       // the tool was invoked
	inFlight bool       // counted in toolwire.calls.in_flight until its result
}

type batchTelKey struct{}
type callTelKey struct{}

func (bt *batchTel) Value(key any) any {
	if key == (batchTelKey{}) {
		return bt
	}
	return bt.Context.Value(key)
}

func (ct *callTel) Value(key any) any {
	if key == (callTelKey{}) {
		return ct
	}
	return ct.Context.Value(key)
}

// noBatchTel and noCallTel stand for state an observer never made.
var (
	noBatchTel = &batchTel{}
)

func batchTelOf(ctx context.Context) *batchTel {
	if bt, ok := ctx.Value(batchTelKey{}).(*batchTel); ok {
		return bt
	}
	return noBatchTel
}

func callTelOf(ctx context.Context) *callTel {
	if ct, ok := ctx.Value(callTelKey{}).(*callTel); ok {
		return ct
	}
	return &callTel{} // written by CallRunning: not the shared noCallTel
}

// batchStarted starts the batch's span, a child of the caller's, and
// returns ctx carrying it.
func (t *otelTelemetry) BatchStarted(ctx context.Context, b *engine.BatchInfo) context.Context {
	if t.tracer == nil {
		return ctx
	}
	bt := &batchTel{}
	bt.Context, bt.span = t.tracer.Start(ctx, spanBatch, internalSpan...)
	ctx = bt
	if !bt.span.IsRecording() {
		return ctx
	}
	sizes := make([]int64, len(b.Lanes))
	parallel := make([]bool, len(b.Lanes))
	for i, l := range b.Lanes {
		sizes[i], parallel[i] = int64(len(l.Calls)), l.Parallel
	}
	bt.span.SetAttributes(
		attrBatchID.String(b.ID),
		attrBatchCalls.Int(len(b.Request.GetCalls())),
		attrBatchLanes.Int(len(b.Lanes)),
		attrBatchLaneSizes.Int64Slice(sizes),
		attrBatchLaneParallel.BoolSlice(parallel),
		attrBatchMaxParallel.Int(b.Parallel),
		attrBatchStopOnError.Bool(b.Request.GetOptions().GetStopOnError()),
		attrBatchRevision.String(b.Revision),
	)
	return ctx
}

// laneStarted marks a lane's start on the batch's span.
func (t *otelTelemetry) LaneStarted(ctx context.Context, b *engine.BatchInfo, li int) {
	span := batchTelOf(ctx).span
	if span == nil || !span.IsRecording() {
		return
	}
	l := b.Lanes[li]
	span.AddEvent("lane", trace.WithAttributes(
		attrLaneIndex.Int(li), attrLaneCalls.Int(len(l.Calls)), attrLaneParallel.Bool(l.Parallel)))
}

// batchEnded ends the batch's span once every call has its result; err is
// what Run returns.
func (t *otelTelemetry) BatchEnded(ctx context.Context, _ *engine.BatchInfo, n engine.BatchCounts, err error) {
	span := batchTelOf(ctx).span
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attrBatchSucceeded.Int(n.Succeeded), attrBatchFailed.Int(n.Failed), attrBatchSkipped.Int(n.Skipped))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// callStarted starts call i's span, a child of the batch's, and returns ctx
// carrying it, so the tool's own outgoing requests (HTTP, MCP) continue the
// trace. Call spans are made only when the batch's span records: a trace
// that is not sampled costs nothing per call.
func (t *otelTelemetry) CallStarted(ctx context.Context, c *engine.CallInfo) context.Context {
	ct := &callTel{Context: ctx}
	bspan := batchTelOf(ctx).span
	if bspan == nil || !bspan.IsRecording() {
		if !t.metrics {
			return ctx
		}
		return ct
	}
	call := c.Call
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs,
		attrOperationName.String(operationExecute),
		attrToolName.String(call.GetName()),
		attrToolCallID.String(call.GetCallId()),
		attrCallIndex.Int(c.Index),
		attrLaneIndex.Int(c.Lane))
	if tool := c.Tool; tool != nil && tool.Description != "" {
		attrs = append(attrs, attrToolDesc.String(tool.Description))
	}
	if t.content {
		attrs = append(attrs, attrToolArgs.String(content(t.redacted(call.GetArguments()))))
	}
	ct.Context, ct.span = t.tracer.Start(ctx, spanToolPrefix+call.GetName(),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ct
}

// callRunning records that call i's tool is about to be invoked.
func (t *otelTelemetry) CallRunning(ctx context.Context, c *engine.CallInfo) {
	ct := callTelOf(ctx)
	ct.ran = true
	if !t.metrics {
		return
	}
	ct.inFlight = true
	m := t.measure(metricTool(c), toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED)
	t.inFlight.Add(context.Background(), 1, m.add...)
	t.queueWait.Record(context.Background(), time.Since(c.Batch.Start).Seconds(), m.rec...)
}

// callAbandoned records that call i's tool ignored its cancellation.
func (t *otelTelemetry) CallAbandoned(ctx context.Context, c *engine.CallInfo) {
	if t.metrics {
		t.abandoned.Add(context.Background(), 1, t.measure(metricTool(c), toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED).add...)
	}
	if span := callTelOf(ctx).span; span != nil {
		span.AddEvent("abandoned")
	}
}

// engineStarted registers the gauge of the bytes waiting for slow readers,
// read when metrics are collected.
func (t *otelTelemetry) EngineStarted(e engine.EngineInfo) {
	if !t.metrics {
		return
	}
	_, err := t.meter.Int64ObservableGauge(metricBuffered, metric.WithUnit("By"),
		metric.WithDescription("Bytes of events waiting for clients to read them, all streams together (max_buffered_bytes bounds it)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(e.Buffered())
			return nil
		}))
	if err != nil {
		otel.Handle(err)
	}
}

// streamEnded counts a stream the send watchdog ended, and marks the
// batch's span. Streams end rarely, so the attribute set is made here.
func (t *otelTelemetry) StreamEnded(ctx context.Context, _ *engine.BatchInfo, reason string) {
	if t.metrics {
		t.ended.Add(context.Background(), 1, metric.WithAttributes(attrEndReason.String(reason)))
	}
	if span := batchTelOf(ctx).span; span != nil {
		span.AddEvent("stream ended", trace.WithAttributes(attrEndReason.String(reason)))
	}
}

// callEnded records call i's result and ends its span. A call that never
// entered its path (skipped by stop_on_error) gets its span here.
func (t *otelTelemetry) CallEnded(ctx context.Context, c *engine.CallInfo, res *toolwirev1.CallResult) {
	ct := callTelOf(ctx)
	tool := metricTool(c)
	kind := toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED
	if res.GetIsError() {
		kind = res.GetErrorKind()
		if kind == toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED {
			kind = toolwirev1.ErrorKind(-1) // errorType says _OTHER
		}
	}
	if t.metrics {
		ctx := context.Background()
		m := t.measure(tool, kind)
		t.results.Add(ctx, 1, m.add...)
		if ct.ran {
			t.duration.Record(ctx, res.GetDuration().AsDuration().Seconds(), m.rec...)
		}
		if res.GetReplayed() {
			t.replays.Add(ctx, 1, t.measure(tool, toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED).add...)
		}
	}
	if ct.inFlight {
		t.inFlight.Add(context.Background(), -1, t.measure(tool, toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED).add...)
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
	if t.content {
		text, n := resultText(res)
		if s := res.GetStructuredContent(); s != "" {
			text, n = t.redacted(s)
		}
		span.SetAttributes(attrToolResult.String(content(text, n)))
	}
	if res.GetIsError() {
		et := errorType(kind)
		span.SetAttributes(attrErrorType.String(et))
		span.SetStatus(codes.Error, et)
	}
	span.End()
}

// metricTool is the call's tool name as metrics label it.
func metricTool(c *engine.CallInfo) string {
	if c.Tool != nil {
		return c.Tool.Name
	}
	return otherTool
}

// resultText is what gen_ai.tool.call.result records: the structured content
// when there is some, else the text blocks, of which it joins no more than
// content keeps; n is the full size.
func resultText(res *toolwirev1.CallResult) (s string, n int) {
	if s := res.GetStructuredContent(); s != "" {
		return s, len(s)
	}
	var sb strings.Builder
	for _, c := range res.GetContent() {
		if t := c.GetText(); t != nil {
			if n > 0 {
				n++
				if sb.Len() <= MaxContentBytes {
					sb.WriteByte('\n')
				}
			}
			text := t.GetText()
			n += len(text)
			if room := MaxContentBytes + utf8.UTFMax - sb.Len(); room > 0 {
				sb.WriteString(text[:min(len(text), room)])
			}
		}
	}
	return sb.String(), n
}

// redacted returns the JSON text s with the values of its secret fields
// redacted, and its length; text that is not JSON is not recorded (its
// secrets cannot be told apart), only its length.
func (t *otelTelemetry) redacted(s string) (string, int) {
	if strings.TrimSpace(s) == "" {
		return s, len(s)
	}
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&v); err != nil || d.More() {
		return "[not JSON: " + strconv.Itoa(len(s)) + " bytes, not recorded]", 0
	}
	b, err := json.Marshal(t.redact.Apply(v))
	if err != nil {
		return "[" + strconv.Itoa(len(s)) + " bytes, not recorded]", 0
	}
	return string(b), len(b)
}

// content returns s, of n bytes in full (s may be a prefix of them), as
// a span records it: whole when n is at most MaxContentBytes; else its
// first MaxContentBytes, cut at a rune's boundary, in a string of its own
// (a substring would keep all of s alive with the span), marked with n.
func content(s string, n int) string {
	if n <= MaxContentBytes {
		return s
	}
	cut := min(len(s), MaxContentBytes)
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "… [" + strconv.Itoa(n) + " bytes, cut to " + strconv.Itoa(cut) + "]"
}
