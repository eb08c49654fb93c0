package rpctelemetry

import (
	"context"
	"net/http"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

func TestRecords(t *testing.T) {
	t.Parallel()
	tp, mp := sdktrace.NewTracerProvider(), sdkmetric.NewMeterProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
	for _, tt := range []struct {
		name string
		got  bool
		want bool
	}{
		{"none", Records(nil, nil), false},
		{"no-op ones", Records(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()), false},
		{"an SDK tracer", Records(tp, nil), true},
		{"an SDK meter", Records(nil, mp), true},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: Records = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	gotTP, gotMP := OrNoop(nil, nil)
	if gotTP == nil || gotMP == nil || Records(gotTP, gotMP) {
		t.Errorf("OrNoop(nil, nil) = %T, %T; want the no-op providers", gotTP, gotMP)
	}
	if gotTP, _ := OrNoop(tp, nil); gotTP != tp {
		t.Error("OrNoop replaced a given provider")
	}
}

func TestExtract(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	sc := trace.SpanContextFromContext(Extract(context.Background(), propagation.HeaderCarrier(h)))
	if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("trace ID %s; want the client's", sc.TraceID())
	}
	mine := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	if got := trace.SpanContextFromContext(Extract(mine, propagation.HeaderCarrier(h))).TraceID(); got != (trace.TraceID{1}) {
		t.Errorf("Extract replaced the span ctx carried: %s", got)
	}
}
