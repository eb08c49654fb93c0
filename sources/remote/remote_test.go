package remote

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/rpctelemetry"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLimit only keeps a broken test from hanging; nothing is timed.
const waitLimit = 30 * time.Second

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newMounts returns mounts over an empty registry with short backoffs,
// closed when the test ends.
func newMounts(t *testing.T) (*Mounts, *tools.Registry) {
	t.Helper()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	m := New(reg, testLogger(t))
	m.set.MinBackoff, m.set.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { m.Close() })
	return m, reg
}

func empty(got []string) bool { return len(got) == 0 }

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "a-b", Target: "h:1"}, "name must match"},
		{Config{Name: "a"}, "target is required"},
		{Config{Name: "a", Target: "h:1", Insecure: true, CAFile: "ca.pem"}, "conflicts"},
		{Config{Name: "a", Target: "h:1", CertFile: "c.pem"}, "go together"},
		{Config{Name: "a", Target: "h:1", Token: "{{bad-name}}"}, "bad environment variable name"},
		{Config{Name: "a", Target: "tools.example:443", Insecure: true, Token: "{{T}}"}, "plaintext only to a loopback target"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	for _, ok := range []Config{
		{Name: "a", Target: "127.0.0.1:50051", Insecure: true, Token: "{{T}}"},
		{Name: "a", Target: "dns:///localhost:1", Insecure: true, Token: "{{T}}"},
		{Name: "a", Target: "[::1]:1", Insecure: true, Token: "{{T}}"},
		{Name: "a", Target: "unix:///run/tw.sock", Insecure: true, Token: "{{T}}"},
		{Name: "a", Target: "tools.example:443", Token: "{{T}}"},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", ok, err)
		}
	}
	if err := ValidateAll([]Config{{Name: "a", Target: "x:1"}, {Name: "a", Target: "y:1"}}); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("duplicate names: %v", err)
	}
}

func TestResultPassesThrough(t *testing.T) {
	t.Parallel()
	in := &toolwirev1.CallResult{
		Content: []*toolwirev1.Content{
			{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: "hi"}}},
			{Block: &toolwirev1.Content_Image{Image: &toolwirev1.ImageContent{Data: []byte{1, 2}, MimeType: "image/png"}}},
		},
		StructuredContent: `{"a":1}`, Details: `{"ui":true}`, IsError: true, ErrorKind: toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT,
	}
	got := result(in)
	want := &tools.Result{
		Content:           []tools.Content{{Text: "hi"}, {Data: []byte{1, 2}, MIMEType: "image/png"}},
		StructuredContent: json.RawMessage(`{"a":1}`), Details: json.RawMessage(`{"ui":true}`),
		IsError: true, ErrorKind: int32(toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT),
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("result:\n got %s\nwant %s", gb, wb)
	}
}

// remoteB is server B's extra tools and what they observed.
type remoteB struct {
	started, cancelled chan struct{}
	mu                 sync.Mutex
	auth               []string
}

func (b *remoteB) tools() []tools.Tool {
	block := tools.Tool{
		Name: "block", Description: "Runs until cancelled.",
		Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			b.started <- struct{}{}
			<-ctx.Done()
			b.cancelled <- struct{}{}
			return nil, ctx.Err()
		},
	}
	details := tools.Tool{
		Name: "details", Description: "Returns details.", Timeout: 7 * time.Second,
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return &tools.Result{Content: []tools.Content{{Text: "see details"}}, StructuredContent: json.RawMessage(`{"n":1}`),
				Details: json.RawMessage(`{"for":"ui"}`)}, nil
		},
	}
	return []tools.Tool{block, details}
}

// recordAuth is a stream interceptor recording each RPC's authorization.
func (b *remoteB) recordAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	b.mu.Lock()
	b.auth = append(b.auth, strings.Join(md.Get("authorization"), ","))
	b.mu.Unlock()
	return h(srv, ss)
}

func TestEndToEnd(t *testing.T) {
	b := &remoteB{started: make(chan struct{}, 1), cancelled: make(chan struct{}, 1)}
	regB, err := tools.NewRegistry(append(diag.Tools(), b.tools()...)...)
	if err != nil {
		t.Fatal(err)
	}
	srvB := loopback.Serve(t, regB, grpcserve.Config{}, grpc.StreamInterceptor(b.recordAuth))

	t.Setenv("REMOTE_TEST_TOKEN", "tok-b")
	mounts, regA := newMounts(t)
	a := loopback.Serve(t, regA, grpcserve.Config{})
	if err := mounts.Sync(context.Background(), []Config{{Name: "b", Target: srvB.Addr, Insecure: true, Token: "{{REMOTE_TEST_TOKEN}}"}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, regA, "B's tools on A", sourcetest.Has("b_echo", "b_sleep", "b_fail", "b_block", "b_details"))
	ctx := context.Background()

	list, err := a.Client.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*toolwirev1.Tool{}
	for _, tool := range list.GetTools() {
		byName[tool.GetName()] = tool
		if tool.GetSource() != toolwirev1.ToolSource_TOOL_SOURCE_REMOTE {
			t.Errorf("%s: source %v", tool.GetName(), tool.GetSource())
		}
	}
	if e := byName["b_echo"]; e.GetTitle() != "Echo" || !e.GetAnnotations().GetReadOnly() || !e.GetAnnotations().GetIdempotent() ||
		!strings.Contains(e.GetInputSchema(), `"text"`) {
		t.Errorf("b_echo declared as %v", e)
	}
	if d := byName["b_details"]; d.GetTimeout().AsDuration() != 7*time.Second || d.GetOutputSchema() == "" {
		t.Errorf("b_details declared as %v", d)
	}

	timeout := &toolwirev1.ToolCall{CallId: "t", Name: "b_sleep", Arguments: `{"ms":60000}`, Timeout: durationpb.New(300 * time.Millisecond)}
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("e1", "b_echo", `{"text":"one"}`),
		client.Call("e2", "b_echo", `{"text":"two"}`),
		client.Call("s", "b_sleep", `{"ms":150}`),
		client.Call("f", "b_fail", `{"message":"nope"}`),
		client.Call("d", "b_details", nil),
		timeout,
	}}
	progress := 0
	var events []*toolwirev1.ExecuteBatchResponse
	for ev, err := range a.Client.ExecuteBatch(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
		if p := ev.GetProgress(); p != nil && p.GetCallId() == "s" && p.Total != nil && *p.Total == 150 {
			progress++
		}
	}
	batch, err := client.Collect(func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for _, ev := range events {
			if !yield(ev, nil) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if l := batch.Accepted.GetLanes(); !l[0].GetParallel() || !slices.Equal(l[0].GetCallIds(), []string{"e1", "e2", "s"}) {
		t.Errorf("lanes %v: want the read-only calls e1, e2, s sharing a parallel lane", l)
	}
	if progress == 0 {
		t.Error("no progress from B's sleep arrived on A")
	}
	r := batch.Results
	if r[0].GetStructuredContent() != `{"text":"one"}` || r[1].GetContent()[0].GetText().GetText() != "two" {
		t.Errorf("echo results: %v %v", r[0], r[1])
	}
	if r[2].GetIsError() || r[2].GetStructuredContent() == "" {
		t.Errorf("sleep result: %v", r[2])
	}
	if !r[3].GetIsError() || r[3].GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR || r[3].GetContent()[0].GetText().GetText() != "nope" {
		t.Errorf("fail result: %v", r[3])
	}
	if r[4].GetDetails() != `{"for":"ui"}` || r[4].GetStructuredContent() != `{"n":1}` || r[4].GetContent()[0].GetText().GetText() != "see details" {
		t.Errorf("details result: %v", r[4])
	}
	if !r[5].GetIsError() || r[5].GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT {
		t.Errorf("timed-out result: %v", r[5])
	}
	b.mu.Lock()
	for _, auth := range b.auth {
		if auth != "Bearer tok-b" {
			t.Errorf("B saw authorization %q", auth)
		}
	}
	b.mu.Unlock()

	t.Run("cancellation reaches B", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			sourcetest.Wait(t, b.started, "B's tool to start")
			cancel()
		}()
		for _, err := range a.Client.ExecuteBatch(cctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("x", "b_block", nil)}}) {
			if err != nil {
				break
			}
		}
		sourcetest.Wait(t, b.cancelled, "B's tool to see the cancellation")
	})

	t.Run("B's changes reach A", func(t *testing.T) {
		before := regA.Snapshot().Revision()
		if err := regB.Add(tools.Tool{Name: "added", Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text("new"), nil }}); err != nil {
			t.Fatal(err)
		}
		if snap := sourcetest.WaitTools(t, regA, "the added tool", sourcetest.Has("b_added")); snap.Revision() == before {
			t.Error("revision unchanged")
		}
		regB.Remove("added")
		sourcetest.WaitTools(t, regA, "the removed tool to go", func(n []string) bool { return !slices.Contains(n, "b_added") })
	})

	t.Run("B stops", func(t *testing.T) {
		srvB.Stop()
		sourcetest.WaitTools(t, regA, "B's tools to go", empty)
	})
}

func TestDownAtStart(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there yet

	mounts, reg := newMounts(t)
	if err := mounts.Sync(context.Background(), []Config{{Name: "late", Target: addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	before := reg.Snapshot()

	regB, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	loopback.ServeOn(t, lis, regB, grpcserve.Config{})
	snap := sourcetest.WaitTools(t, reg, "the tools once B is up", sourcetest.Has("late_echo"))
	if snap.Revision() == before.Revision() {
		t.Error("revision unchanged")
	}
	tool, _ := snap.Lookup("late_echo")
	res, err := tool.Handler(context.Background(), tools.NewCall("c", "late_echo", json.RawMessage(`{"text":"up"}`), nil))
	if err != nil || res.IsError || res.Content[0].Text != "up" {
		t.Errorf("late_echo: %+v, %v", res, err)
	}

	if err := mounts.Sync(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the tools to go after Sync(nil)", empty)
}

// TestSessionsStayTheCallers calls a mounted tool as two callers sending
// one session_id: the remote sees every call as the mount's, so each
// caller's session must reach it as its own. It did not: the bare ID made
// one remote session (one workspace) of both callers'. A caller's calls
// keep one session there, and a call without a session has none.
func TestSessionsStayTheCallers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	regB, err := tools.NewRegistry(tools.Tool{Name: "whoami", Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
		mu.Lock()
		seen = append(seen, c.SessionID)
		mu.Unlock()
		return tools.Text("ok"), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srvB := loopback.Serve(t, regB, grpcserve.Config{})
	mounts, regA := newMounts(t)
	if err := mounts.Sync(context.Background(), []Config{{Name: "b", Target: srvB.Addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, regA, "B's tool on A", sourcetest.Has("b_whoami"))
	tool, _ := snap.Lookup("b_whoami")
	for _, c := range []struct{ caller, session string }{{"alice", "conv-1"}, {"bob", "conv-1"}, {"alice", "conv-1"}, {"alice", ""}} {
		call := tools.NewCall("c", "b_whoami", json.RawMessage(`{}`), nil)
		call.Caller, call.SessionID = c.caller, c.session
		if res, err := tool.Handler(context.Background(), call); err != nil || res.IsError {
			t.Fatalf("%+v: %v %+v", c, err, res)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	alice, bob := seen[0], seen[1]
	if alice == bob || alice == "conv-1" || seen[2] != alice || seen[3] != "" || len(alice) > 256 {
		t.Errorf("the remote saw sessions %q; want alice's and bob's apart, alice's the same twice, none for no session", seen)
	}
}

// TestTraceContinuesBaggageStays: a call forwarded to the remote carries
// the caller's trace (traceparent, tracestate), as every source's request
// does, but not the baggage the agent sent toolwire: baggage is whatever
// the agent chose, and the remote, which sees every call as the mount's,
// is reached by no agent. The client's default propagator sent it on.
func TestTraceContinuesBaggageStays(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen metadata.MD
	record := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if info.FullMethod == toolwirev1.ToolService_ExecuteBatch_FullMethodName {
			md, _ := metadata.FromIncomingContext(ss.Context())
			mu.Lock()
			seen = md.Copy()
			mu.Unlock()
		}
		return h(srv, ss)
	}
	regB, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	srvB := loopback.Serve(t, regB, grpcserve.Config{}, grpc.StreamInterceptor(record))
	mounts, regA := newMounts(t)
	if err := mounts.Sync(context.Background(), []Config{{Name: "b", Target: srvB.Addr, Insecure: true}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, regA, "B's tools on A", sourcetest.Has("b_echo"))
	tool, _ := snap.Lookup("b_echo")

	// The context a surface hands the call: the agent's trace and baggage.
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := rpctelemetry.Extract(context.Background(), propagation.MapCarrier{
		"traceparent": traceparent, "tracestate": "agent=1", "baggage": "tenant=acme,user.secret=s3cr3t"})
	if baggage.FromContext(ctx).Len() != 2 {
		t.Fatal("the agent's baggage is not in the call's context")
	}
	if res, err := tool.Handler(ctx, tools.NewCall("c", "b_echo", json.RawMessage(`{"text":"hi"}`), nil)); err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := seen.Get("traceparent"); len(got) != 1 || !strings.HasPrefix(got[0], "00-0af7651916cd43dd8448eb211c80319c-") {
		t.Errorf("the remote saw traceparent %q; want the agent's trace", got)
	}
	if got := seen.Get("tracestate"); len(got) != 1 || got[0] != "agent=1" {
		t.Errorf("the remote saw tracestate %q; want the trace's", got)
	}
	if got := seen.Get("baggage"); len(got) != 0 {
		t.Errorf("the remote saw the agent's baggage %q", got)
	}
}
