package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TestOpenTelemetryIsChosenOnce checks the choice Config.Observer holds:
// nothing without a provider that records, OpenTelemetry's no-op ones
// included, and the execute_tool spans of a plain Run with one.
func TestOpenTelemetryIsChosenOnce(t *testing.T) {
	t.Parallel()
	if o := OpenTelemetry(nil, nil, false); o != nil {
		t.Errorf("OpenTelemetry(nil, nil) = %T; want nil", o)
	}
	if o := OpenTelemetry(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider(), false); o != nil {
		t.Errorf("OpenTelemetry of the no-op providers = %T; want nil", o)
	}

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	e := newTestEngine(t, Config{Observer: OpenTelemetry(tp, nil, false)})
	if err := e.Run(context.Background(), engineTools(t, func(string) {}), calls(tc("a", "echo")), &recorder{}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
	}
	if len(names) != 2 || names[0] != "execute_tool echo" || names[1] != "execute_batch" {
		t.Errorf("spans %q; want execute_tool echo, then execute_batch", names)
	}
}

// TestSkippedCallsGetSpans checks that calls that never start, here skipped
// after a failure with stop_on_error, still get their execute_tool span.
func TestSkippedCallsGetSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	te := newTestBed(t, Config{Observer: OpenTelemetry(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil, false)})
	te.run(t, &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{
			call("f1", "fail", `{"message":"no"}`),
			call("s1", "echo", `{"text":"never"}`),
		},
		Options: &toolwirev1.BatchOptions{StopOnError: true},
	})
	spans := rec.Ended() // Run has ended them all
	batch := only(t, spans, "execute_batch")
	s := only(t, spans, "execute_tool echo")
	a := attrs(s)
	if a["error.type"].AsString() != "skipped" || a["toolwire.call.ran"].AsBool() || a["toolwire.lane.index"].AsInt64() != 1 ||
		s.Parent().SpanID() != batch.SpanContext().SpanID() || s.Status().Code != otelcodes.Error {
		t.Errorf("skipped call's span: attributes %v, parent %v, status %v", a, s.Parent().SpanID(), s.Status())
	}
	if ba := attrs(batch); ba["toolwire.batch.skipped"].AsInt64() != 1 {
		t.Errorf("batch attributes %v; want one skipped", ba)
	}
}

// TestLogHandler checks the handler on its own: fields from a span in the
// context, none without one, and the wrapping survives With and WithGroup.
func TestLogHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()

	log.InfoContext(ctx, "with span")
	log.Info("without context")
	log.WithGroup("g").InfoContext(ctx, "grouped", "k", "v")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines; want 3:\n%s", len(lines), buf.String())
	}
	sc := span.SpanContext()
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if first["trace_id"] != sc.TraceID().String() || first["span_id"] != sc.SpanID().String() || first["component"] != "test" {
		t.Errorf("line with a span: %s", lines[0])
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("line without a span has a trace_id: %s", lines[1])
	}
	if !strings.Contains(lines[2], sc.TraceID().String()) {
		t.Errorf("grouped line lost the trace: %s", lines[2])
	}
	if h := LogHandler(log.Handler()); h != log.Handler() {
		t.Error("LogHandler wrapped its own handler again")
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// only returns the one span of spans named name.
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
