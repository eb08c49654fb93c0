package grpcserve

import (
	"context"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/toolwire/toolwire/internal/rpctelemetry"
)

// StatsHandler returns otelgrpc's gRPC stats handler on the server's
// providers: RPC spans and metrics, with W3C trace context and baggage read
// from incoming metadata, so a client's trace continues into the server.
// Health checks are not traced: probes would drown the traces. Serve
// installs it when a provider records (see TelemetryOptions); add it with
// grpc.StatsHandler when registering the server on a grpc.Server of your
// own.
func (s *Server) StatsHandler() stats.Handler {
	opts := []otelgrpc.Option{
		otelgrpc.WithPropagators(rpctelemetry.Propagator),
		otelgrpc.WithFilter(filters.Not(filters.ServiceName("grpc.health.v1.Health"))),
	}
	// A provider the Config leaves nil records nothing.
	tp, mp := rpctelemetry.OrNoop(s.cfg.TracerProvider, s.cfg.MeterProvider)
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
	md := incomingMetadata{ctx}
	if md.Get("traceparent") == "" && md.Get("baggage") == "" {
		return ctx // the usual case, and free: no carrier to allocate
	}
	return rpctelemetry.Extract(ctx, md)
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
