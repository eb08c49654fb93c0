package client

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// telemetry is the client's OpenTelemetry configuration.
type telemetry struct {
	off bool
	tp  trace.TracerProvider
	mp  metric.MeterProvider
}

// WithTracerProvider makes the client's RPC spans with tp. By default the
// client uses otel.GetTracerProvider(), which records nothing until the
// program installs an SDK. Either way the W3C trace context (traceparent)
// and baggage of each RPC's context are sent to the server, so the server's
// spans join the caller's trace.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tel.tp = tp }
}

// WithMeterProvider records the client's RPC metrics (otelgrpc's
// rpc.client.* instruments) with mp. By default the client uses
// otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.tel.mp = mp }
}

// WithoutTelemetry leaves out the OpenTelemetry stats handler: no client
// spans or metrics, and no trace context sent to the server. By default the
// handler is installed.
func WithoutTelemetry() Option {
	return func(o *options) { o.tel.off = true }
}

// dialOption returns the stats handler's dial option, or nil when off.
func (t telemetry) dialOption() grpc.DialOption {
	if t.off {
		return nil
	}
	opts := []otelgrpc.Option{
		// Explicit, not the global propagator: that is a no-op unless the
		// program sets one, and the trace would silently stop here.
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
	}
	if t.tp != nil {
		opts = append(opts, otelgrpc.WithTracerProvider(t.tp))
	}
	if t.mp != nil {
		opts = append(opts, otelgrpc.WithMeterProvider(t.mp))
	}
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(opts...))
}
