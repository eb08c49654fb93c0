package mcpsource

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
	"github.com/toolwire/toolwire/tools"
)

// BenchmarkCall measures one forwarded call of a small read-only tool, from
// the toolwire handler to the MCP server and back.
func BenchmarkCall(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  func(b *testing.B) ServerConfig
	}{
		{"stdio", func(*testing.B) ServerConfig { return ServerConfig{Name: "s", Command: stdioServer} }},
		{"http", func(b *testing.B) ServerConfig {
			return ServerConfig{Name: "s", URL: newHTTPServer(b, testserver.Hooks{}).URL}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			reg, _ := tools.NewRegistry()
			g := New(reg, nil)
			defer g.Close()
			if err := g.Sync(context.Background(), []ServerConfig{tc.cfg(b)}); err != nil {
				b.Fatal(err)
			}
			tool, _ := sourcetest.WaitTools(b, reg, "s_read", sourcetest.Has("s_read")).Lookup("s_read")
			args := []byte(`{"text":"hello"}`)
			b.ReportAllocs()
			for b.Loop() {
				res, err := tool.Handler(context.Background(), tools.NewCall("c", "s_read", args, nil))
				if err != nil || res.IsError {
					b.Fatal(err, res)
				}
			}
		})
	}
}

// BenchmarkEverythingCall times the gateway's handler calling
// server-everything's echo over stdio, through the SDK's CallTool and on the
// gateway's own JSON-RPC (see call.go), one after the other in each run.
func BenchmarkEverythingCall(b *testing.B) {
	reg, _ := tools.NewRegistry()
	g := New(reg, nil)
	defer g.Close()
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "ev", Command: everything(b), Args: []string{"stdio"}}}); err != nil {
		b.Fatal(err)
	}
	tool, _ := sourcetest.WaitTools(b, reg, "ev_echo", sourcetest.Has("ev_echo")).Lookup("ev_echo")
	args := []byte(`{"message":"hello"}`)
	for range 300 { // warm up, so the first path does not pay for it
		if _, err := tool.Handler(context.Background(), tools.NewCall("c", "ev_echo", args, nil)); err != nil {
			b.Fatal(err)
		}
	}
	for _, sdk := range []bool{true, false} {
		b.Run(map[bool]string{true: "sdk", false: "direct"}[sdk], func(b *testing.B) {
			sdkCalls = sdk
			defer func() { sdkCalls = false }()
			b.ReportAllocs()
			for b.Loop() {
				r, err := tool.Handler(context.Background(), tools.NewCall("c", "ev_echo", args, nil))
				if err != nil || r.IsError || len(r.Content) != 1 || r.Content[0].Text != "Echo: hello" {
					b.Fatal(err, r)
				}
			}
		})
	}
}

// BenchmarkForwardedEcho compares server-everything's echo over stdio called
// directly with the go-sdk client and through toolwire: a one-call
// ExecuteBatch over loopback gRPC, forwarded by the gateway to a second
// process of the same server. They take turns in blocks, so each runs hot
// and a noisy neighbour slows both alike. It reports each one's p50, their
// ratio (forwarded/direct), and the p50 of the gateway's handler called
// alone (the gateway's share of the forwarded call).
func BenchmarkForwardedEcho(b *testing.B) {
	bin := everything(b)
	ctx := context.Background()
	cmd := exec.Command(bin, "stdio")
	cmd.Env = os.Environ()
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()

	reg, _ := tools.NewRegistry()
	g := New(reg, nil)
	defer g.Close()
	if err := g.Sync(ctx, []ServerConfig{{Name: "ev", Command: bin, Args: []string{"stdio"}}}); err != nil {
		b.Fatal(err)
	}
	tool, _ := sourcetest.WaitTools(b, reg, "ev_echo", sourcetest.Has("ev_echo")).Lookup("ev_echo")
	tw := loopback.Serve(b, reg, grpcserve.Config{}).Client

	args := `{"message":"hello"}`
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("e", "ev_echo", args)}}
	systems := []func(){
		func() { // direct
			r, err := direct.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}})
			if err != nil || r.IsError {
				b.Fatal(err, r)
			}
		},
		func() { // forwarded
			for ev, err := range tw.ExecuteBatch(ctx, req) {
				if err != nil {
					b.Fatal(err)
				}
				if r := ev.GetResult(); r != nil && r.GetIsError() {
					b.Fatal(r)
				}
			}
		},
		func() { // the gateway's handler alone
			r, err := tool.Handler(ctx, tools.NewCall("c", "ev_echo", []byte(args), nil))
			if err != nil || r.IsError {
				b.Fatal(err, r)
			}
		},
	}
	for range 200 { // warm up
		for _, call := range systems {
			call()
		}
	}
	const block = 50
	lat := make([][]time.Duration, len(systems))
	for b.Loop() {
		for k, call := range systems {
			for range block {
				start := time.Now()
				call()
				lat[k] = append(lat[k], time.Since(start))
			}
		}
	}
	d, f, h := p50(lat[0]), p50(lat[1]), p50(lat[2])
	b.ReportMetric(float64(d.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(f.Microseconds()), "forwarded-p50-µs")
	b.ReportMetric(float64(h.Microseconds()), "handler-p50-µs")
	b.ReportMetric(float64(f)/float64(d), "forwarded/direct")
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
