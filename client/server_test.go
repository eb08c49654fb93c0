package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
)

// transports are the ways tests reach the in-process server.
var transports = []string{"tcp", "bufconn"}

// newTestServer starts a server offering ts (the diag tools when ts is nil)
// over transport ("tcp" on 127.0.0.1:0, or "bufconn" in memory) and returns
// a client for it. Both are shut down when the test ends.
func newTestServer(tb testing.TB, transport string, ts []tools.Tool, opts ...grpc.ServerOption) *client.Client {
	tb.Helper()
	if ts == nil {
		ts = diag.Tools()
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		tb.Fatal(err)
	}
	eng := engine.New(engine.Config{
		DrainTimeout: time.Second,
		AbandonGrace: time.Second,
	}, engine.Deps{
		Logger: slog.New(slog.DiscardHandler),
	})
	tb.Cleanup(eng.Close) // after Serve has returned: cleanups run last first
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		tb.Fatal(err)
	}

	var (
		lis    net.Listener
		target string
		copts  []client.Option
	)
	switch transport {
	case "tcp":
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			tb.Fatal(err)
		}
		target = lis.Addr().String()
	case "bufconn":
		bl := bufconn.Listen(1 << 20)
		lis, target = bl, "passthrough:///bufconn"
		copts = append(copts, client.WithDialOptions(grpc.WithContextDialer(
			func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) })))
	default:
		tb.Fatalf("unknown transport %q", transport)
	}

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, opts...) }()

	c, err := client.New(target, copts...)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("closing client: %v", err)
		}
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			tb.Errorf("Serve: %v", err)
		}
	})
	return c
}
