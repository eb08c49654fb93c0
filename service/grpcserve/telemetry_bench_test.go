package grpcserve

import (
	"net"
	"testing"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/otelobserver"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkTelemetryInProcess measures what telemetry adds to a one-call
// batch without gRPC: "off" uses the default no-op providers, "sdk" records
// every span (sampled, then dropped: no exporter) and every metric.
//
//	go test ./service -run '^$' -bench TelemetryInProcess -count 6
func BenchmarkTelemetryInProcess(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: echoArgs}}}
	for _, mode := range []string{"off", "sdk"} {
		b.Run(mode, func(b *testing.B) {
			var deps engine.Deps
			if mode == "sdk" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				deps.Observer = otelobserver.New(tp, mp, false)
			}
			srv := newSurface(b, reg, engine.Config{}, deps)
			b.ReportAllocs()
			for b.Loop() {
				if err := srv.ExecuteBatch(req, nullStream{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStatsHandler measures a one-call batch over loopback gRPC with and
// without the otelgrpc stats handler that Serve installs, with the default
// no-op providers: the price of trace propagation when nothing records.
func BenchmarkStatsHandler(b *testing.B) {
	for _, mode := range []string{"without", "with"} {
		b.Run(mode, func(b *testing.B) {
			reg, err := tools.NewRegistry(diag.Tools()...)
			if err != nil {
				b.Fatal(err)
			}
			srv := newSurface(b, reg, engine.Config{}, engine.Deps{})
			var opts []grpc.ServerOption
			if mode == "with" {
				opts = append(opts, grpc.StatsHandler(srv.StatsHandler()))
			}
			gs := grpc.NewServer(opts...)
			srv.Register(gs)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = gs.Serve(lis) }()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { conn.Close(); gs.Stop() })
			c := toolwirev1.NewToolServiceClient(conn)
			b.ReportAllocs()
			for b.Loop() {
				if err := batchCall(b.Context(), c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
