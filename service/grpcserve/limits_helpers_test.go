package grpcserve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/otelobserver"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// servedServer is a server run by Serve, with its ServerOptions, over real
// TCP; each RPC's caller is the "x-test-caller" metadata, standing in for
// the authentication interceptor.
type servedServer struct {
	srv     *Server
	addr    string
	accepts *atomic.Int32 // connections accepted
	hold    *holdTools
}

// newServedServer serves the diag tools, the hold tools and extra on an
// engine made with ec until the test ends.
func newServedServer(tb testing.TB, ec engine.Config, extra ...tools.Tool) *servedServer {
	tb.Helper()
	return newServedSurface(tb, ec, Config{}, extra...)
}

// newServedSurface is newServedServer with the surface's settings cfg; the
// engine's telemetry, unless ec sets it, is made from cfg's providers.
func newServedSurface(tb testing.TB, ec engine.Config, cfg Config, extra ...tools.Tool) *servedServer {
	tb.Helper()
	h := newHoldTools()
	reg, err := tools.NewRegistry(append(append(diag.Tools(), h.tools()...), extra...)...)
	if err != nil {
		tb.Fatal(err)
	}
	eng := engine.New(ec, engine.Deps{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: otelobserver.New(cfg.TracerProvider, cfg.MeterProvider, false),
	})
	srv, err := New(eng, reg, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cl := &countingListener{Listener: lis}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(ctx, cl,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return handler(testCaller(ctx), req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
				return handler(srv, &ctxStream{ServerStream: ss, ctx: testCaller(ss.Context())})
			}))
	}()
	tb.Cleanup(func() {
		h.releaseAll()
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			tb.Errorf("Serve: %v", err)
		}
		eng.Close()
	})
	return &servedServer{srv: srv, addr: lis.Addr().String(), accepts: &cl.accepts, hold: h}
}

// client returns a client of its own connection, closed when the test ends.
func (s *servedServer) client(tb testing.TB, opts ...grpc.DialOption) toolwirev1.ToolServiceClient {
	tb.Helper()
	conn, err := grpc.NewClient(s.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return toolwirev1.NewToolServiceClient(conn)
}

func testCaller(ctx context.Context) context.Context {
	if v := metadata.ValueFromIncomingContext(ctx, "x-test-caller"); len(v) > 0 {
		return engine.WithCaller(ctx, v[0])
	}
	return ctx
}

// as returns a context whose RPCs come from caller.
func as(caller string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-test-caller", caller)
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

type countingListener struct {
	net.Listener
	accepts atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
	}
	return c, err
}

// holdTools are read-only tools that block until the test releases them:
// "hold" also returns when its context ends, "hold_stubborn" does not.
type holdTools struct {
	started  chan string // call IDs, as they start
	release  chan struct{}
	released atomic.Bool
}

func newHoldTools() *holdTools {
	return &holdTools{started: make(chan string, 64), release: make(chan struct{})}
}

func (h *holdTools) releaseAll() {
	if h.released.CompareAndSwap(false, true) {
		close(h.release)
	}
}

func (h *holdTools) tools() []tools.Tool {
	hold := func(stubborn bool) tools.Handler {
		return func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			h.started <- call.ID
			done := ctx.Done()
			if stubborn {
				done = nil
			}
			select {
			case <-h.release:
				return tools.Text("released"), nil
			case <-done:
				return nil, ctx.Err()
			}
		}
	}
	return []tools.Tool{
		{Name: "hold", Description: "blocks until released", Annotations: tools.Annotations{ReadOnly: true}, Handler: hold(false)},
		{Name: "hold_stubborn", Description: "blocks until released, ignoring cancellation", Annotations: tools.Annotations{ReadOnly: true}, Handler: hold(true)},
	}
}
