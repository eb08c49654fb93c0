package engine

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TestOpenTelemetryIsChosenOnce checks the choice Config.Telemetry holds:
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
	e := newTestEngine(t, Config{Telemetry: OpenTelemetry(tp, nil, false)})
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
