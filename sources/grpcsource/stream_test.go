package grpcsource

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// expiringCtx is a call's context whose deadline comes when the test says
// (as DeadlineExceeded, what a deadline's context reports), so that what
// arrived before it is known without timing anything.
type expiringCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringCtx(parent context.Context) *expiringCtx {
	return &expiringCtx{Context: parent, done: make(chan struct{})}
}

func (c *expiringCtx) Done() <-chan struct{} { return c.done }

func (c *expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *expiringCtx) expire() { c.once.Do(func() { close(c.done) }) }

// TestStreamDeadline: a stream that never ends (Health/Watch) gives, when
// the call's deadline comes, the messages that arrived, not TIMEOUT; when
// the call is cancelled instead, it gives the cancellation; when nothing
// arrived, the deadline.
func TestStreamDeadline(t *testing.T) {
	t.Parallel()
	addr, hs := startServices(t)
	s, reg, _ := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "h", Target: addr, Insecure: true, Include: []string{"grpc.health.v1.Health"}}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "Watch", sourcetest.Has("h_Health_Watch"))
	watch, _ := snap.Lookup("h_Health_Watch")
	if !strings.Contains(watch.Description, "the messages that arrived by then") {
		t.Errorf("Watch's description does not say what its deadline gives: %q", watch.Description)
	}

	// Two messages: the status at first, and after a change; then the
	// deadline.
	ctx := newExpiringCtx(t.Context())
	var mu sync.Mutex
	outputs := 0
	res, err := watch.Handler(ctx, tools.NewCall("w", watch.Name, []byte(`{"service":""}`), func(p tools.Progress) {
		mu.Lock()
		defer mu.Unlock()
		switch outputs++; outputs {
		case 1:
			hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		case 2:
			ctx.expire()
		}
	}))
	if err != nil || res.IsError {
		t.Fatalf("Watch at its deadline: %v %+v", err, res)
	}
	var got streamResult
	if err := json.Unmarshal(res.StructuredContent, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 2 || string(got.Messages[0]) != `{"status":"SERVING"}` || string(got.Messages[1]) != `{"status":"NOT_SERVING"}` ||
		!strings.Contains(got.Incomplete, "deadline") || text(res) != string(res.StructuredContent) {
		t.Errorf("Watch at its deadline: %s", res.StructuredContent)
	}
	if err := watch.ValidateOutput(res.StructuredContent); err != nil {
		t.Errorf("the result fails Watch's output schema: %v", err)
	}

	// Cancelled, not timed out: the cancellation, whatever arrived.
	cctx, cancel := context.WithCancel(t.Context())
	_, err = watch.Handler(cctx, tools.NewCall("w", watch.Name, []byte(`{}`), func(tools.Progress) { cancel() }))
	if err != context.Canceled {
		t.Errorf("Watch cancelled: %v", err)
	}

	// The deadline before any message: the deadline, for the engine to
	// report as TIMEOUT. (An unknown service's Watch sends SERVICE_UNKNOWN
	// at once; a dead context sends nothing.)
	dead := newExpiringCtx(t.Context())
	dead.expire()
	if _, err := watch.Handler(dead, tools.NewCall("w", watch.Name, []byte(`{}`), nil)); err != context.DeadlineExceeded {
		t.Errorf("Watch with nothing before its deadline: %v", err)
	}
}

// TestFiniteStream: a stream that ends gives all its messages in order;
// one past maxStreamBytes is cut there and cancelled, and says so.
func TestFiniteStream(t *testing.T) {
	t.Parallel()
	addr, _ := startServices(t)
	s, reg, _ := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "i", Target: addr, Insecure: true, Include: []string{"grpc.testing.TestService"}}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the TestService's tools", sourcetest.Has("i_TestService_StreamingOutputCall", "i_TestService_UnaryCall"))
	var outs int
	res := call(t, t.Context(), reg, "i_TestService_StreamingOutputCall", `{"responseParameters":[{"size":1},{"size":2},{"size":3}]}`, func(tools.Progress) { outs++ })
	want := `{"messages":[{"payload":{"body":"AA=="}},{"payload":{"body":"AAA="}},{"payload":{"body":"AAAA"}}]}`
	if res.IsError || string(res.StructuredContent) != want || outs != 3 {
		t.Errorf("StreamingOutputCall: %s (%d outputs); want %s", res.StructuredContent, outs, want)
	}

	params := strings.Repeat(`{"size":400000},`, 5)
	res = call(t, t.Context(), reg, "i_TestService_StreamingOutputCall", `{"responseParameters":[`+strings.TrimSuffix(params, ",")+`]}`, nil)
	var got streamResult
	if err := json.Unmarshal(res.StructuredContent, &got); err != nil || res.IsError {
		t.Fatalf("a large stream: %v %s", err, text(res))
	}
	// Each message is some 533 KB of JSON (400,000 bytes in base64): one
	// fits in 1 MiB.
	if len(got.Messages) != 1 || !strings.Contains(got.Incomplete, "more than 1048576 bytes of JSON: it was cancelled, and these are the 1 messages before that") {
		t.Errorf("a large stream: %d messages, %q", len(got.Messages), got.Incomplete)
	}

	res = call(t, t.Context(), reg, "i_TestService_UnaryCall", `{"responseStatus":{"code":9,"message":"not now"}}`, nil)
	if !res.IsError || text(res) != "/grpc.testing.TestService/UnaryCall: gRPC status FailedPrecondition: not now" {
		t.Errorf("UnaryCall with a status: %s", text(res))
	}
	// A status that leaves open whether the call ran says so: a model
	// would send it again, and it could run twice.
	for _, code := range []int{2, 13, 14, 15} {
		res = call(t, t.Context(), reg, "i_TestService_UnaryCall", fmt.Sprintf(`{"responseStatus":{"code":%d,"message":"gone"}}`, code), nil)
		if !res.IsError || !strings.HasSuffix(text(res), ": gone (the server may have received the call, and run it, before this: check before calling it again)") {
			t.Errorf("UnaryCall with status %d: %s", code, text(res))
		}
	}
}

// TestStreamWindow: stream_window is the timeout of the server-streaming
// methods' tools, not the others'.
func TestStreamWindow(t *testing.T) {
	t.Parallel()
	addr, _ := startServices(t)
	s, reg, _ := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "h", Target: addr, Insecure: true, Include: []string{"grpc.health.v1.Health"}, StreamWindow: 5 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the health tools", sourcetest.Has("h_Health_Watch", "h_Health_Check"))
	watch, _ := snap.Lookup("h_Health_Watch")
	check, _ := snap.Lookup("h_Health_Check")
	if watch.Timeout != 5*time.Second || check.Timeout != 0 {
		t.Errorf("timeouts: Watch %s, Check %s", watch.Timeout, check.Timeout)
	}
}

// blockingHealth's Check waits, once entered, until its server goes.
type blockingHealth struct {
	healthpb.UnimplementedHealthServer
	entered chan struct{}
}

func (b *blockingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	close(b.entered)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestConnectionLostDuringTheCall: a server that goes while it runs a
// call leaves the client UNAVAILABLE, which says nothing of whether the
// call ran; the result says it may have, so that a model checks before it
// sends the call again.
func TestConnectionLostDuringTheCall(t *testing.T) {
	t.Parallel()
	gs := grpc.NewServer()
	bh := &blockingHealth{entered: make(chan struct{})}
	healthpb.RegisterHealthServer(gs, bh)
	reflection.Register(gs)
	addr := serveOn(t, gs)
	s, reg, _ := newServices(t)
	if err := s.Sync(t.Context(), []Config{{Name: "b", Target: addr, Insecure: true, Include: []string{"grpc.health.v1.Health"}}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "Check", sourcetest.Has("b_Health_Check"))
	go func() {
		<-bh.entered
		gs.Stop() // closes the connection while Check runs
	}()
	res := call(t, t.Context(), reg, "b_Health_Check", `{}`, nil)
	if !res.IsError || !strings.Contains(text(res), "gRPC status Unavailable") || !strings.HasSuffix(text(res), "(the server may have received the call, and run it, before this: check before calling it again)") {
		t.Errorf("Check when the server went: %s", text(res))
	}
	// A method whose proto says it is idempotent (or has no side
	// effects) may be sent again: no such warning.
	if got := (&method{idempotent: true}).mayHaveRun(codes.Unavailable); got != "" {
		t.Errorf("an idempotent method's UNAVAILABLE: %q", got)
	}
}
