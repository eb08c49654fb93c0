// Package rpctelemetry is what the RPC surfaces (service, connectserve)
// share of their telemetry: the providers a surface is given, whether they
// record anything, and the propagator that reads the trace context and
// baggage a client sends. Each surface keeps its own instrumentation
// library (otelgrpc, otelconnect); this is the one place the choices they
// must make alike are made.
package rpctelemetry

import (
	"context"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Propagator reads the W3C trace context and baggage a client sends, so
// a client's trace continues into the server on every surface.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Records reports whether tp or mp records anything: given, and not
// OpenTelemetry's no-op provider. A surface instruments its RPCs only
// then, the choice the engine's telemetry makes too: any instrumentation,
// even one that records nothing, costs each RPC.
func Records(tp trace.TracerProvider, mp metric.MeterProvider) bool {
	_, noopTP := tp.(tracenoop.TracerProvider)
	_, noopMP := mp.(metricnoop.MeterProvider)
	return (tp != nil && !noopTP) || (mp != nil && !noopMP)
}

// OrNoop returns tp and mp with nil replaced by the no-op providers: an
// instrumentation library given none would take OpenTelemetry's global
// ones, which the server's choice must not depend on.
func OrNoop(tp trace.TracerProvider, mp metric.MeterProvider) (trace.TracerProvider, metric.MeterProvider) {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	return tp, mp
}

// Extract returns ctx carrying the trace context and baggage carrier
// holds, unless ctx already carries a span (the surface's instrumentation
// put it there): without instrumentation, tools still continue the
// client's trace, and log lines name it.
func Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return Propagator.Extract(ctx, carrier)
}
