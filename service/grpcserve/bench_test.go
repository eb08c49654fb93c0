package grpcserve

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// The benchmarks compare a one-call ExecuteBatch of echo with the floor: a
// bare gRPC unary echo on the same server and connection, over loopback TCP.
//
//	go test ./service -run '^$' -bench Echo -count 6 | tee new.txt && benchstat new.txt
//
// The ratios (p50-ratio, throughput-ratio) are what to compare across
// machines: toolwire's cost over the floor, measured side by side.

type unaryEcho struct {
	testpb.UnimplementedTestServiceServer
}

func (unaryEcho) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

const echoArgs = `{"text":"hello"}`

// benchConn serves toolwire and the unary echo on one server: a bare one,
// or with served, toolwire's own options as Serve sets them (its tap handle,
// codec and limits), which the floor's call then passes through as well.
func benchConn(b *testing.B, served bool) *grpc.ClientConn {
	b.Helper()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	srv := newSurface(b, reg, engine.Config{}, engine.Deps{})
	var opts []grpc.ServerOption
	if served {
		opts = srv.ServerOptions()
	}
	gs := grpc.NewServer(opts...)
	srv.Register(gs)
	testpb.RegisterTestServiceServer(gs, unaryEcho{})
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
	return conn
}

func unaryCall(ctx context.Context, c testpb.TestServiceClient) error {
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(echoArgs)}})
	return err
}

func batchCall(ctx context.Context, c toolwirev1.ToolServiceClient) error {
	stream, err := c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: echoArgs}}})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if r := ev.GetResult(); r != nil && r.GetIsError() {
			panic("echo failed: " + r.String())
		}
	}
}

// BenchmarkEcho measures both kinds of call in one loop, alternating, so the
// noise of a shared machine falls on both alike; it reports each one's p50
// and p99 and the ratio of the p50s. Its server is a bare grpc.Server;
// BenchmarkEchoServed's has toolwire's ServerOptions.
func BenchmarkEcho(b *testing.B) { benchEcho(b, false) }

// BenchmarkEchoServed is BenchmarkEcho on a server with toolwire's
// ServerOptions, as Serve and go run ./bench build it: what the tap handle
// that makes each ExecuteBatch stream's context stoppable, and the codec,
// add to a batch.
func BenchmarkEchoServed(b *testing.B) { benchEcho(b, true) }

func benchEcho(b *testing.B, served bool) {
	conn := benchConn(b, served)
	unary, tw := testpb.NewTestServiceClient(conn), toolwirev1.NewToolServiceClient(conn)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		var u, t []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			if err := unaryCall(ctx, unary); err != nil {
				b.Fatal(err)
			}
			mid := time.Now()
			if err := batchCall(ctx, tw); err != nil {
				b.Fatal(err)
			}
			u, t = append(u, mid.Sub(start)), append(t, time.Since(mid))
		}
		up50, tp50 := reportLatency(b, "unary", u), reportLatency(b, "batch", t)
		b.ReportMetric(float64(tp50)/float64(up50), "p50-ratio")
	})
	// Throughput at 64 callers: windows of unary calls and of batches take
	// turns, and each kind's calls are counted over its own windows.
	b.Run("callers=64", func(b *testing.B) {
		const window = 100 * time.Millisecond
		var counts, elapsed [2]float64
		for n := 0; b.Loop(); n++ {
			kind := n % 2
			var done atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range 64 {
				wg.Go(func() {
					for time.Since(start) < window {
						var err error
						if kind == 0 {
							err = unaryCall(ctx, unary)
						} else {
							err = batchCall(ctx, tw)
						}
						if err != nil {
							b.Error(err)
							return
						}
						done.Add(1)
					}
				})
			}
			wg.Wait()
			counts[kind] += float64(done.Load())
			elapsed[kind] += time.Since(start).Seconds()
		}
		if elapsed[0] == 0 || elapsed[1] == 0 {
			return
		}
		u, t := counts[0]/elapsed[0], counts[1]/elapsed[1]
		b.ReportMetric(u, "unary-calls/s")
		b.ReportMetric(t, "batch-calls/s")
		b.ReportMetric(t/u, "throughput-ratio")
	})
}

// reportLatency reports the p50 and p99 of lat and returns the p50.
func reportLatency(b *testing.B, name string, lat []time.Duration) time.Duration {
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, name+"-p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, name+"-p99-µs")
	return p50
}

// nullStream is a server stream that discards what is sent.
type nullStream struct {
	grpc.ServerStream
}

func (nullStream) Send(*toolwirev1.ExecuteBatchResponse) error { return nil }
func (nullStream) Context() context.Context                    { return context.Background() }

// BenchmarkExecuteBatchInProcess measures the server's own cost of a batch,
// without gRPC: for profiling what toolwire adds.
func BenchmarkExecuteBatchInProcess(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	srv := newSurface(b, reg, engine.Config{}, engine.Deps{})
	for _, name := range []string{"echo", "unknown"} {
		b.Run(name, func(b *testing.B) {
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: name, Arguments: echoArgs}}}
			b.ReportAllocs()
			for b.Loop() {
				if err := srv.ExecuteBatch(req, nullStream{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
