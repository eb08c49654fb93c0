package grpcserve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer is an in-process server reached over bufconn.
type testServer struct {
	srv    *Server
	reg    *tools.Registry
	client toolwirev1.ToolServiceClient
	conn   *grpc.ClientConn
}

// serveBufconn serves srv on a new grpc.Server over an in-memory
// listener and returns it with a client connection to it; the caller stops
// and closes them.
func serveBufconn(tb testing.TB, srv *Server) (*grpc.Server, *grpc.ClientConn) {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	return gs, conn
}

// newSurface returns the surface of a new engine made with ec and deps
// (logging nowhere unless deps say otherwise), serving reg; the engine is
// closed when the test ends.
func newSurface(tb testing.TB, reg *tools.Registry, ec engine.Config, deps engine.Deps) *Server {
	tb.Helper()
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	eng := engine.New(ec, deps)
	tb.Cleanup(eng.Close)
	srv, err := New(eng, reg, Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return srv
}

func newTestServer(tb testing.TB, ec engine.Config, extra ...tools.Tool) *testServer {
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
	gs, conn := serveBufconn(tb, srv)
	tb.Cleanup(func() {
		conn.Close()
		gs.Stop()
		eng.Close()
	})
	return &testServer{srv: srv, reg: reg, client: toolwirev1.NewToolServiceClient(conn), conn: conn}
}

// call builds a ToolCall.
func call(id, name, args string) *toolwirev1.ToolCall {
	return &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: args}
}

// run executes a batch and returns every event, failing the test on an RPC
// error.
func (ts *testServer) run(tb testing.TB, req *toolwirev1.ExecuteBatchRequest) []*toolwirev1.ExecuteBatchResponse {
	tb.Helper()
	events, err := ts.runErr(context.Background(), req)
	if err != nil {
		tb.Fatalf("ExecuteBatch: %v", err)
	}
	return events
}

func (ts *testServer) runErr(ctx context.Context, req *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.ExecuteBatchResponse, error) {
	stream, err := ts.client.ExecuteBatch(ctx, req)
	if err != nil {
		return nil, err
	}
	return drain(stream)
}

// startBatch sends req and reads its events up to the first CallStarted, so
// that a call is known to be running when it returns.
func startBatch(tb testing.TB, ctx context.Context, client toolwirev1.ToolServiceClient, req *toolwirev1.ExecuteBatchRequest) grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse] {
	tb.Helper()
	stream, err := client.ExecuteBatch(ctx, req)
	if err != nil {
		tb.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			tb.Fatalf("stream ended before a call started: %v", err)
		}
		if ev.GetStarted() != nil {
			return stream
		}
	}
}

// drain reads the rest of a batch's stream: the events, and the RPC's error
// unless it ended cleanly.
func drain(stream grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse]) ([]*toolwirev1.ExecuteBatchResponse, error) {
	var events []*toolwirev1.ExecuteBatchResponse
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		events = append(events, ev)
	}
}

// results returns the results of events by call ID, failing on a call with
// more than one result.
func results(tb testing.TB, events []*toolwirev1.ExecuteBatchResponse) map[string]*toolwirev1.CallResult {
	tb.Helper()
	out := map[string]*toolwirev1.CallResult{}
	for _, ev := range events {
		if r := ev.GetResult(); r != nil {
			if _, dup := out[r.GetCallId()]; dup {
				tb.Errorf("call %q has more than one result", r.GetCallId())
			}
			out[r.GetCallId()] = r
		}
	}
	return out
}

func text(r *toolwirev1.CallResult) string {
	var b strings.Builder
	for _, c := range r.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// waitFor waits for cond to hold, failing the test just before its own
// deadline: what it waits for must happen, and a fixed bound (it was 10s)
// is one a loaded machine can outlast.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := testenv.Deadline(tb)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met by the test's deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const (
	kindNone      = toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED
	kindToolError = toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR
	kindCancelled = toolwirev1.ErrorKind_ERROR_KIND_CANCELLED
)
