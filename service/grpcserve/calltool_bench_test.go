package grpcserve

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// CallTool's benchmarks, beside BenchmarkEcho's (bench_test.go): the floor
// and CallTool alternate in one loop, on one server and connection.
//
//	go test ./service -run '^$' -bench CallTool -count 6 | tee new.txt && benchstat new.txt

func callToolEcho(ctx context.Context, c toolwirev1.ToolServiceClient) error {
	resp, err := c.CallTool(ctx, &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "1", Name: "echo", Arguments: echoArgs}})
	if err != nil {
		return err
	}
	if r := resp.GetResult(); r.GetIsError() {
		panic("echo failed: " + r.String())
	}
	return nil
}

// BenchmarkCallTool reports CallTool's p50 and p99 beside the unary
// floor's, and the ratio of the p50s (serial); and each one's calls per
// second at 64 callers, in windows that take turns, with their ratio.
func BenchmarkCallTool(b *testing.B) {
	conn := benchConn(b, false)
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
			if err := callToolEcho(ctx, tw); err != nil {
				b.Fatal(err)
			}
			u, t = append(u, mid.Sub(start)), append(t, time.Since(mid))
		}
		up50, tp50 := reportLatency(b, "unary", u), reportLatency(b, "calltool", t)
		b.ReportMetric(float64(tp50)/float64(up50), "p50-ratio")
	})
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
							err = callToolEcho(ctx, tw)
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
		b.ReportMetric(t, "calltool-calls/s")
		b.ReportMetric(t/u, "throughput-ratio")
	})
}

// BenchmarkCallToolInProcess measures the handler's own cost, without
// gRPC: its allocations are what CallTool adds to a unary RPC's.
func BenchmarkCallToolInProcess(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b.Cleanup(eng.Close)
	srv, err := New(eng, reg, Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"echo", "unknown"} {
		b.Run(name, func(b *testing.B) {
			req := &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "1", Name: name, Arguments: echoArgs}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := srv.CallTool(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
