package service

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
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
	state  *toolState
}

// newTestServer starts a server with the diag tools and the test tools of
// testTools, over bufconn, and stops it when the test ends.
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

// newSurface returns the surface of a new engine made with ec, serving
// reg; the engine is closed when the test ends.
func newSurface(tb testing.TB, reg *tools.Registry, ec engine.Config) *Server {
	tb.Helper()
	eng := engine.New(ec)
	tb.Cleanup(eng.Close)
	return New(eng, reg, Config{})
}

func newTestServer(tb testing.TB, ec engine.Config, extra ...tools.Tool) *testServer {
	tb.Helper()
	st := &toolState{release: make(chan struct{})}
	reg, err := tools.NewRegistry(append(append(diag.Tools(), testTools(st)...), extra...)...)
	if err != nil {
		tb.Fatal(err)
	}
	if ec.Logger == nil {
		ec.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	eng := engine.New(ec)
	srv := New(eng, reg, Config{})
	gs, conn := serveBufconn(tb, srv)
	tb.Cleanup(func() {
		close(st.release) // lets tools that ignore cancellation return
		conn.Close()
		gs.Stop()
		st.wg.Wait()
		eng.Close()
	})
	return &testServer{srv: srv, reg: reg, client: toolwirev1.NewToolServiceClient(conn), conn: conn, state: st}
}

// toolState is what the test tools share with a test.
type toolState struct {
	mu       sync.Mutex
	log      []string // "start name id" / "end name id", in order
	running  atomic.Int32
	peak     atomic.Int32
	reports  atomic.Int64
	ctxDone  chan string // call IDs whose context ended, when set
	release  chan struct{}
	wg       sync.WaitGroup // tools that ignore cancellation
	sawError atomic.Value
}

func (st *toolState) record(s string) {
	st.mu.Lock()
	st.log = append(st.log, s)
	st.mu.Unlock()
}

func (st *toolState) entries() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.log...)
}

type msArgs struct {
	MS int `json:"ms"`
}

// testTools returns tools with behaviour the invariants need to observe.
func testTools(st *toolState) []tools.Tool {
	work := func(readOnly bool) tools.Handler {
		return func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			var a msArgs
			_ = json.Unmarshal(call.Arguments, &a)
			n := st.running.Add(1)
			defer st.running.Add(-1)
			for {
				p := st.peak.Load()
				if n <= p || st.peak.CompareAndSwap(p, n) {
					break
				}
			}
			st.record("start " + call.ID)
			defer st.record("end " + call.ID)
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
				return tools.Text("done " + call.ID), nil
			case <-ctx.Done():
				if st.ctxDone != nil {
					st.ctxDone <- call.ID
				}
				return nil, ctx.Err()
			}
		}
	}
	msSchema := json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}}}`)
	return []tools.Tool{
		{Name: "read", Description: "safe work", InputSchema: msSchema, Annotations: tools.Annotations{ReadOnly: true}, Handler: work(true)},
		{Name: "write", Description: "unsafe work", InputSchema: msSchema, Annotations: tools.Annotations{Destructive: true}, Handler: work(false)},
		{Name: "boom", Description: "panics", Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			panic("kaboom")
		}},
		{Name: "stubborn", Description: "ignores cancellation", Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			st.wg.Add(1)
			defer st.wg.Done()
			<-st.release
			return tools.Text("too late"), nil
		}},
		{Name: "own_error", Description: "reports its own error when cancelled", Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			<-ctx.Done()
			return tools.Errorf("my own error"), nil
		}},
		{Name: "big", Description: "returns n bytes", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				var a struct{ N int }
				_ = json.Unmarshal(call.Arguments, &a)
				return &tools.Result{
					Content: []tools.Content{{Text: strings.Repeat("x", a.N)}, {Data: make([]byte, a.N), MIMEType: "image/png"}},
					Details: json.RawMessage(`{"n":` + strings.Repeat("1", 3) + `}`),
				}, nil
			}},
		{Name: "chatty", Description: "reports n progress events of size bytes", Annotations: tools.Annotations{ReadOnly: true},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"size":{"type":"integer"}}}`),
			Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
				var a struct{ N, Size int }
				_ = json.Unmarshal(call.Arguments, &a)
				chunk := strings.Repeat("o", a.Size)
				for range a.N {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					call.Output(chunk)
					st.reports.Add(1)
				}
				return tools.Text("reported"), nil
			}},
		{Name: "ticker", Description: "reports progress every 20ms for ms milliseconds", InputSchema: msSchema,
			Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
				var a msArgs
				_ = json.Unmarshal(call.Arguments, &a)
				end := time.After(time.Duration(a.MS) * time.Millisecond)
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-end:
						return tools.Text("ticked"), nil
					case <-tick.C:
						call.Progressf(1, 2, "tick")
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
			}},
		{Name: "bad_output", Description: "returns output that violates its schema",
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
			Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
				return &tools.Result{StructuredContent: json.RawMessage(`{"n":"not a number"}`)}, nil
			}},
	}
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
