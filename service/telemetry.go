package service

import (
	"context"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// propagator reads the trace context and baggage a client sends.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// StatsHandler returns otelgrpc's gRPC stats handler on the server's
// providers: RPC spans and metrics, with W3C trace context and baggage read
// from incoming metadata, so a client's trace continues into the server.
// Health checks are not traced: probes would drown the traces. Serve
// installs it when a provider records (see TelemetryOptions); add it with
// grpc.StatsHandler when registering the server on a grpc.Server of your
// own.
func (s *Server) StatsHandler() stats.Handler {
	opts := []otelgrpc.Option{
		otelgrpc.WithPropagators(propagator),
		otelgrpc.WithFilter(filters.Not(filters.ServiceName("grpc.health.v1.Health"))),
	}
	// A provider the Config leaves nil records nothing; otelgrpc would
	// take OpenTelemetry's global one instead, which the Config's choice
	// must not depend on.
	var tp trace.TracerProvider = tracenoop.NewTracerProvider()
	if s.cfg.TracerProvider != nil {
		tp = s.cfg.TracerProvider
	}
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	if s.cfg.MeterProvider != nil {
		mp = s.cfg.MeterProvider
	}
	return otelgrpc.NewServerHandler(append(opts, otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp))...)
}

// TelemetryOptions returns the grpc.ServerOptions that Serve instruments its
// grpc.Server with: StatsHandler's, when the Config gave a tracer or meter
// provider that records, and none otherwise (none given, or
// OpenTelemetry's no-op ones), the choice engine.OpenTelemetry makes for
// the engine's telemetry. Any stats handler, even one that records
// nothing, costs gRPC a copy of each RPC's metadata and an event per
// message; without one, ExecuteBatch reads the client's trace context
// itself, so tools still continue the client's trace.
func (s *Server) TelemetryOptions() []grpc.ServerOption {
	if !s.cfg.records() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(s.StatsHandler())}
}

// withClientTrace returns ctx carrying the trace context and baggage the
// client sent, unless it already carries a span (otelgrpc's stats handler
// put it there). Without a stats handler this is what lets tools continue
// the client's trace, and log lines name it.
func withClientTrace(ctx context.Context) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md := incomingMetadata{ctx}
	if md.Get("traceparent") == "" && md.Get("baggage") == "" {
		return ctx // the usual case, and free: no carrier to allocate
	}
	return propagator.Extract(ctx, md)
}

// incomingMetadata is a ctx's incoming gRPC metadata as a TextMapCarrier,
// read key by key: copying all of it, as metadata.FromIncomingContext does,
// costs more than the lookups.
type incomingMetadata struct{ ctx context.Context }

func (m incomingMetadata) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(m.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values makes several baggage headers count, as otelgrpc's carrier does.
func (m incomingMetadata) Values(key string) []string {
	return metadata.ValueFromIncomingContext(m.ctx, key)
}

func (incomingMetadata) Set(string, string) {} // read only

func (m incomingMetadata) Keys() []string {
	md, _ := metadata.FromIncomingContext(m.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
