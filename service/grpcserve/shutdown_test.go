package grpcserve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// tcpServer serves the diag tools on a real loopback TCP listener until the
// returned stop function is called; stop waits for Serve to return.
func tcpServer(tb testing.TB, ec engine.Config, extra ...tools.Tool) (*Server, *grpc.ClientConn, func() error) {
	tb.Helper()
	reg, err := tools.NewRegistry(append(diag.Tools(), extra...)...)
	if err != nil {
		tb.Fatal(err)
	}
	eng := engine.New(ec, engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv, err := New(eng, reg, Config{})
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		err := <-served
		eng.Close()
		return err
	}
	tb.Cleanup(func() {
		conn.Close()
		_ = stop()
	})
	return srv, conn, stop
}

func TestEndToEndOverTCP(t *testing.T) {
	t.Parallel()
	_, conn, _ := tcpServer(t, engine.Config{})
	client := toolwirev1.NewToolServiceClient(conn)
	stream, err := client.ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("s", "sleep", `{"ms":120}`), call("e", "echo", `{"text":"tcp"}`), call("f", "fail", `{"message":"nope"}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	events, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	got := results(t, events)
	if text(got["e"]) != "tcp" || got["e"].GetStructuredContent() != `{"text":"tcp"}` {
		t.Errorf("echo result %v", got["e"])
	}
	if got["f"].GetErrorKind() != kindToolError || text(got["f"]) != "nope" {
		t.Errorf("fail result %v", got["f"])
	}
	progress := 0
	for _, ev := range events {
		if p := ev.GetProgress(); p != nil && p.GetCallId() == "s" && p.Total != nil {
			progress++
		}
	}
	if progress < 2 {
		t.Errorf("sleep reported progress %d times in 120ms, want at least 2", progress)
	}
	if events[len(events)-1].GetFinished().GetSucceeded() != 2 {
		t.Errorf("finished %v", events[len(events)-1])
	}
}

func TestGracefulShutdownDrainsThenCancels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		drain    time.Duration
		sleepMS  string
		wantKind toolwirev1.ErrorKind
	}{
		// A drain timeout far past the sleep: the batch finishing within it
		// is what must happen, not a speed claim (5s once bet it would).
		{"running batch finishes within the drain timeout", time.Minute, "300", kindNone},
		{"calls past the drain timeout are cancelled with results", 200 * time.Millisecond, "60000", kindCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, conn, stop := tcpServer(t, engine.Config{DrainTimeout: tt.drain})
			client := toolwirev1.NewToolServiceClient(conn)
			health := healthpb.NewHealthClient(conn)
			ctx := context.Background()
			stream := startBatch(t, ctx, client, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
				call("s", "sleep", `{"ms":`+tt.sleepMS+`}`), call("after", "echo", `{"text":"x"}`),
			}, Options: &toolwirev1.BatchOptions{Sequential: true}})
			// Health is watched from before the stop: its NOT_SERVING is pushed
			// to the watch, however long the test takes to read it, where
			// polling Check had to land between the status change and the
			// server's end (the sleep, or the drain timeout: 200ms).
			watchCtx, stopWatch := context.WithCancel(ctx)
			defer stopWatch()
			watch, err := health.Watch(watchCtx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health before the stop: %v %v, want SERVING", resp.GetStatus(), err)
			}
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()

			if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Fatalf("health once stopping: %v %v, want NOT_SERVING", resp.GetStatus(), err)
			}
			stopWatch() // the graceful stop waits for every RPC, this watch too
			// Health says NOT_SERVING first (routing stops), then the
			// engine drains: a batch sent in between is still served.
			<-srv.engine.Draining()
			_, err = (&testServer{client: client}).runErr(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("n", "echo", `{"text":"x"}`)}})
			if status.Code(err) != codes.Unavailable {
				t.Errorf("new batch while draining: %v, want Unavailable", err)
			}

			events, err := drain(stream)
			if err != nil {
				t.Fatalf("stream ended with %v, want a clean end", err)
			}
			got := results(t, events)
			if r := got["s"]; r.GetErrorKind() != tt.wantKind {
				t.Errorf("sleep: %v %q, want %v", r.GetErrorKind(), text(r), tt.wantKind)
			}
			if tt.wantKind == kindCancelled && !strings.Contains(text(got["after"]), "shutting down") {
				t.Errorf("call after the cancelled one: %q, want cancelled by shutdown", text(got["after"]))
			}
			if len(events) == 0 || events[len(events)-1].GetFinished() == nil {
				t.Error("the drained batch did not end with BatchFinished")
			}
			if err := <-stopped; err != nil {
				t.Errorf("Serve returned %v", err)
			}
		})
	}
}

func TestShutdownDoesNotWaitForAnAbandonedTool(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	returned := make(chan struct{})
	stubborn := tools.Tool{Name: "stubborn", Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
		defer close(returned)
		<-release
		return nil, nil
	}}
	t.Cleanup(func() { close(release); <-returned })
	_, conn, stop := tcpServer(t, engine.Config{DrainTimeout: 50 * time.Millisecond, AbandonGrace: 50 * time.Millisecond}, stubborn)
	stream := startBatch(t, context.Background(), toolwirev1.NewToolServiceClient(conn), &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{call("x", "stubborn", "")}})
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	events, err := drain(stream)
	if err != nil {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
	if r := results(t, events)["x"]; r.GetErrorKind() != kindCancelled || !strings.Contains(text(r), "abandoned") {
		t.Errorf("result %v %q, want CANCELLED saying the tool was abandoned", r.GetErrorKind(), text(r))
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown waited for a tool that ignores cancellation")
	}
}

func TestShutdownEndsWatchTools(t *testing.T) {
	t.Parallel()
	_, conn, stop := tcpServer(t, engine.Config{})
	watch, err := toolwirev1.NewToolServiceClient(conn).WatchTools(context.Background(), &toolwirev1.WatchToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("WatchTools after shutdown: %v, want Unavailable", err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown waited for a WatchTools stream")
	}
}

// TestSurfacesShareAnEngine checks New: two gRPC surfaces over one engine
// run their batches on it (one's batch is counted while the other lists
// tools), and one surface's shutdown drains the shared engine, so the
// other refuses new batches as a server shutting down does.
func TestSurfacesShareAnEngine(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{DrainTimeout: 50 * time.Millisecond, AbandonGrace: 50 * time.Millisecond}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close)
	dial := func(srv *Server) (*grpc.Server, toolwirev1.ToolServiceClient) {
		gs, conn := serveBufconn(t, srv)
		t.Cleanup(func() { conn.Close(); gs.Stop() })
		return gs, toolwirev1.NewToolServiceClient(conn)
	}
	a, err := New(eng, reg, Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(eng, reg, Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, clientA := dial(a)
	_, clientB := dial(b)

	stream, err := clientA.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("s", "sleep", `{"ms":60000}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // accepted: the batch runs on the engine
		t.Fatal(err)
	}
	if n := eng.Stats().Batches; n != 1 {
		t.Fatalf("the shared engine runs %d batches; want A's one", n)
	}
	if resp, err := clientB.ListTools(t.Context(), &toolwirev1.ListToolsRequest{}); err != nil || len(resp.GetTools()) == 0 {
		t.Fatalf("B's ListTools: %v, %d tools", err, len(resp.GetTools()))
	}
	done := make(chan struct{})
	go func() { a.Shutdown(); close(done) }()
	<-eng.Draining()
	streamB, err := clientB.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("e", "echo", `{"text":"x"}`)}})
	if err == nil {
		_, err = drain(streamB)
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("B's batch while A shuts down the shared engine: %v; want UNAVAILABLE", err)
	}
	<-done
}
