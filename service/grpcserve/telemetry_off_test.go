package grpcserve_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/otelobserver"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
)

// TestTelemetryOptions checks when Serve installs otelgrpc's stats handler:
// only when a provider records.
func TestTelemetryOptions(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  grpcserve.Config
		want int
	}{
		{"globals without an SDK", grpcserve.Config{}, 0},
		{"no-op providers", grpcserve.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}, 0},
		{"tracer SDK", grpcserve.Config{TracerProvider: sdktrace.NewTracerProvider()}, 1},
		{"meter SDK", grpcserve.Config{MeterProvider: sdkmetric.NewMeterProvider()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newSurface(t, reg, engine.Config{}, tc.cfg)
			if got := len(srv.TelemetryOptions()); got != tc.want {
				t.Errorf("TelemetryOptions() has %d options; want %d", got, tc.want)
			}
		})
	}
}

// TestClientTraceWithoutSDK checks that a server whose providers record
// nothing, and which Serve therefore runs without a stats handler, still
// hands the client's trace context and baggage to its tools, so that what
// they send on continues the client's trace.
func TestClientTraceWithoutSDK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  grpcserve.Config
	}{
		{"globals", grpcserve.Config{}},
		{"no-op providers", grpcserve.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			type seen struct {
				sc     trace.SpanContext
				tenant string
			}
			got := make(chan seen, 1)
			probe := tools.Tool{
				Name: "probe", Description: "reports the trace its context carries",
				Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
					got <- seen{trace.SpanContextFromContext(ctx), baggage.FromContext(ctx).Member("tenant").Value()}
					return tools.Text("probed"), nil
				},
			}
			reg, err := tools.NewRegistry(probe)
			if err != nil {
				t.Fatal(err)
			}
			clientTP := sdktrace.NewTracerProvider()
			srv := newSurface(t, reg, engine.Config{}, tc.cfg)
			c, stop := serveOverBufconn(t, srv, client.WithTracerProvider(clientTP))
			t.Cleanup(stop)

			member, err := baggage.NewMember("tenant", "acme")
			if err != nil {
				t.Fatal(err)
			}
			bag, err := baggage.New(member)
			if err != nil {
				t.Fatal(err)
			}
			turn, parent := clientTP.Tracer("agent").Start(baggage.ContextWithBaggage(context.Background(), bag), "agent turn")
			b, err := client.Collect(c.ExecuteBatch(turn, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("p1", "probe", "")}}))
			parent.End()
			if err != nil {
				t.Fatal(err)
			}
			if r := b.Results[0]; r.GetIsError() {
				t.Fatalf("probe failed: %v", r)
			}
			s := <-got
			if s.sc.TraceID() != parent.SpanContext().TraceID() || !s.sc.IsRemote() {
				t.Errorf("tool's context carries span context %+v; want the client's trace %v, remote", s.sc, parent.SpanContext().TraceID())
			}
			if s.tenant != "acme" {
				t.Errorf("tool's context carries baggage tenant=%q; want acme", s.tenant)
			}
		})
	}
}

// TestStatsHandlerIgnoresGlobalProviders checks that a provider the Config
// leaves nil records nothing, even when OpenTelemetry's global one would:
// with only a tracer provider given, a global meter provider with a reader
// sees no RPC metrics, while the given tracer records the RPC's span. (Not
// parallel: it sets the global provider, and restores it.)
func TestStatsHandlerIgnoresGlobalProviders(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })

	spans := tracetest.NewSpanRecorder()
	reg, err := tools.NewRegistry(tools.Tool{Name: "noop", Description: "does nothing", Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
		return tools.Text("done"), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := newSurface(t, reg, engine.Config{}, grpcserve.Config{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	c, stop := serveOverBufconn(t, srv)
	if _, err := client.Collect(c.ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "noop", "")}})); err != nil {
		t.Fatal(err)
	}
	stop() // the server's RPC has ended, and with it what it records

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if strings.HasPrefix(m.Name, "rpc.server.") { // the client takes the globals by design
				t.Errorf("the global meter provider recorded %s (scope %s); the Config gave none", m.Name, sm.Scope.Name)
			}
		}
	}
	rpc := false
	for _, s := range spans.Ended() {
		rpc = rpc || s.Name() == "toolwire.v1.ToolService/ExecuteBatch"
	}
	if !rpc {
		t.Errorf("the given tracer provider recorded no RPC span; spans: %d", len(spans.Ended()))
	}
}

// newSurface returns the gRPC surface with cfg of an engine made with ec,
// logging nowhere, with the telemetry of cfg's providers, as toolwire
// serve makes them; the engine is closed when the test ends.
func newSurface(t *testing.T, reg *tools.Registry, ec engine.Config, cfg grpcserve.Config) *grpcserve.Server {
	t.Helper()
	eng := engine.New(ec, engine.Deps{
		Logger:   slog.New(slog.DiscardHandler),
		Observer: otelobserver.New(cfg.TracerProvider, cfg.MeterProvider, false),
	})
	t.Cleanup(eng.Close)
	srv, err := grpcserve.New(eng, reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// serveOverBufconn runs srv.Serve, stats handler and all, on an in-memory
// listener and returns a client of it, and a stop that closes the client,
// shuts the server down and waits for Serve to return.
func serveOverBufconn(t *testing.T, srv *grpcserve.Server, opts ...client.Option) (*client.Client, func()) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	c, err := client.New("passthrough:///bufconn", append(opts,
		client.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })))...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return c, func() {
		c.Close()
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	}
}
