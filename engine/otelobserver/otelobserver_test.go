package otelobserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/otelobserver"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// run runs req on an engine observed by obs, over the diag tools.
func run(t *testing.T, obs engine.Observer, req *toolwirev1.ExecuteBatchRequest) {
	t.Helper()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler), Observer: obs})
	defer e.Close()
	if err := e.Run(context.Background(), reg.Snapshot(), req, engine.SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })); err != nil {
		t.Fatal(err)
	}
}

func calls(cs ...*toolwirev1.ToolCall) *toolwirev1.ExecuteBatchRequest {
	return &toolwirev1.ExecuteBatchRequest{Calls: cs}
}

func call(id, name, args string) *toolwirev1.ToolCall {
	return &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: args}
}

// TestChosenOnce: nothing without a provider that records, OpenTelemetry's
// no-op ones included, and the execute_tool spans of a plain Run with one.
func TestChosenOnce(t *testing.T) {
	t.Parallel()
	if o := otelobserver.New(nil, nil, false); o != nil {
		t.Errorf("New(nil, nil) = %T; want nil", o)
	}
	if o := otelobserver.New(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider(), false); o != nil {
		t.Errorf("New of the no-op providers = %T; want nil", o)
	}
	spans := tracetest.NewSpanRecorder()
	run(t, otelobserver.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), nil, false), calls(call("a", "echo", `{"text":"hi"}`)))
	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
	}
	if len(names) != 2 || names[0] != "execute_tool echo" || names[1] != "execute_batch" {
		t.Errorf("spans %q; want execute_tool echo, then execute_batch", names)
	}
}

// TestSkippedCallsGetSpans: calls that never start, here skipped after a
// failure with stop_on_error, still get their execute_tool span, a child
// of the batch's.
func TestSkippedCallsGetSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	req := calls(call("f1", "fail", `{"message":"no"}`), call("s1", "echo", `{"text":"never"}`))
	req.Options = &toolwirev1.BatchOptions{StopOnError: true}
	run(t, otelobserver.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil, false), req)
	spans := rec.Ended()
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

// TestLongNamesAreBounded: a call naming a tool of a megabyte makes spans
// whose names and attributes stay short (the engine cuts the name once).
func TestLongNamesAreBounded(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	run(t, otelobserver.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil, false),
		calls(call("a", strings.Repeat("x", 1<<20), `{}`), call("b", "echo", `{"text":"ok"}`)))
	for _, sp := range rec.Ended() {
		if len(sp.Name()) > 200 {
			t.Errorf("span name of %d bytes", len(sp.Name()))
		}
		for _, a := range sp.Attributes() {
			if v := a.Value.Emit(); len(v) > 300 {
				t.Errorf("span %.40q: attribute %s of %d bytes", sp.Name(), a.Key, len(v))
			}
		}
	}
}

// TestStreamEndedIsCounted: StreamEnded counts toolwire.streams.ended by
// reason.
func TestStreamEndedIsCounted(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	obs := otelobserver.New(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), false)
	obs.StreamEnded(context.Background(), &engine.BatchInfo{ID: "b"}, "max_buffered_bytes")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "toolwire.streams.ended" {
				for _, dp := range sum.DataPoints {
					if r, _ := dp.Attributes.Value("toolwire.stream.end_reason"); r.AsString() == "max_buffered_bytes" && dp.Value == 1 {
						return
					}
				}
			}
		}
	}
	t.Errorf("no toolwire.streams.ended{max_buffered_bytes} = 1 in %+v", rm)
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value
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

// TestContentIsBounded: with trace_content, a call's arguments and result
// are recorded cut to MaxContentBytes, marked with their size, and in
// memory of their own: a span kept the whole argument (512 KiB here) until
// exported, and against a collector that did not answer, 700 batches of
// three such calls held 4.5 GB in the exporter's queue.
func TestContentIsBounded(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	big := `{"text":"` + strings.Repeat("é", 1<<18) + `"}`
	req := calls(call("a", "echo", big), call("b", "echo", `{"text":"small"}`))
	run(t, otelobserver.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil, true), req)
	for _, sp := range rec.Ended() {
		a := attrs(sp)
		if sp.Name() != "execute_tool echo" {
			continue
		}
		id := a["gen_ai.tool.call.id"].AsString()
		for _, k := range []attribute.Key{"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
			v := a[k].AsString()
			switch {
			case id == "b" && k == "gen_ai.tool.call.arguments" && v != `{"text":"small"}`:
				t.Errorf("call b: %s %q; want the arguments whole", k, v)
			case id == "a" && (len(v) > otelobserver.MaxContentBytes+100 || !utf8.ValidString(v) || !strings.Contains(v, "bytes")):
				t.Errorf("call a: %s of %d bytes (UTF-8: %v), ending %q; want at most %d and the size marked",
					k, len(v), utf8.ValidString(v), v[max(0, len(v)-60):], otelobserver.MaxContentBytes)
			case id == "a" && k == "gen_ai.tool.call.arguments" && shares(v, req.Calls[0].Arguments):
				t.Errorf("call a: %s points into the call's %d bytes of arguments, which the span keeps alive", k, len(req.Calls[0].Arguments))
			}
		}
	}
}

// shares reports whether sub's bytes lie within s's.
func shares(sub, s string) bool {
	if len(sub) == 0 || len(s) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.StringData(sub))), uintptr(unsafe.Pointer(unsafe.StringData(s)))
	return p >= lo && p < lo+uintptr(len(s))
}

// TestContentRedactsSecrets: with trace_content, a call's arguments and
// its structured result are recorded with the values of secret fields
// redacted, as the audit trail records arguments (redact.SecretNames, at
// any depth and in name/value pairs, and audit_redact's names), and text
// that is not JSON is not recorded at all.
func TestContentRedactsSecrets(t *testing.T) {
	t.Parallel()
	mirror := tools.Tool{Name: "mirror", Description: "returns its arguments as its structured result",
		InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
			return &tools.Result{StructuredContent: call.Arguments}, nil
		}}
	reg, err := tools.NewRegistry(mirror)
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	obs := otelobserver.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil, true, "card_number")
	e := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler), Observer: obs})
	defer e.Close()
	args := `{"url":"https://example.com","config":{"api_key":"s3cr3t-1"},"headers":[{"name":"Authorization","value":"Bearer s3cr3t-2"}],"cardNumber":"s3cr3t-3","n":12345678901234567890}`
	req := calls(call("a", "mirror", args), call("b", "mirror", `not json s3cr3t-4`))
	if err := e.Run(context.Background(), reg.Snapshot(), req, engine.SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, sp := range rec.Ended() {
		if sp.Name() != "execute_tool mirror" {
			continue
		}
		a := attrs(sp)
		for _, k := range []attribute.Key{"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
			v, ok := a[k]
			if !ok {
				continue
			}
			seen++
			if strings.Contains(v.AsString(), "s3cr3t") {
				t.Errorf("call %s: %s holds a secret: %s", a["gen_ai.tool.call.id"].AsString(), k, v.AsString())
			}
			if a["gen_ai.tool.call.id"].AsString() == "a" {
				for _, kept := range []string{`"url":"https://example.com"`, `"api_key":"[redacted]"`, `"value":"[redacted]"`, `12345678901234567890`} {
					if !strings.Contains(v.AsString(), kept) {
						t.Errorf("call a: %s lacks %s: %s", k, kept, v.AsString())
					}
				}
			}
		}
	}
	if seen < 3 {
		t.Errorf("%d content attributes recorded; want the arguments of both calls and a's result", seen)
	}
}
