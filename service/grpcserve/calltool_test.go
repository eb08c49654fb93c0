package grpcserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The tokens of callToolServer's two callers: alice may call echo only,
// bob anything.
const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef01"
)

// callToolServer is a server as Serve runs it, over loopback TCP, with
// bearer-token authentication, permissions and the diag tools, plus:
// "block", which reports on entered, waits for its context and reports
// its end on ended;
// "stubborn", which ignores cancellation until the test ends; and
// "count", which counts its runs.
type callToolServer struct {
	client  toolwirev1.ToolServiceClient
	log     *logbuf.Buffer // the server's debug log, JSON
	entered chan struct{}  // block's calls, as they start
	ended   chan error     // block's context errors
	runs    atomic.Int32
}

func newCallToolServer(t *testing.T) *callToolServer {
	t.Helper()
	s := &callToolServer{log: &logbuf.Buffer{}, entered: make(chan struct{}, 1), ended: make(chan error, 1)}
	release := make(chan struct{})
	var stubborn sync.WaitGroup
	extra := []tools.Tool{
		{Name: "block", Description: "waits for its context", Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			s.entered <- struct{}{}
			<-ctx.Done()
			s.ended <- ctx.Err()
			return nil, ctx.Err()
		}},
		{Name: "stubborn", Description: "ignores cancellation", Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			stubborn.Add(1)
			defer stubborn.Done()
			<-release
			return tools.Text("too late"), nil
		}},
		{Name: "count", Description: "counts its runs", InputSchema: json.RawMessage(`{"type":"object"}`), Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return tools.Text(strings.Repeat("x", int(s.runs.Add(1)))), nil
		}},
	}
	reg, err := tools.NewRegistry(append(diag.Tools(), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.New(auth.Config{
		Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}, {Name: "bob", Hash: auth.HashToken(bobToken)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{
		AbandonGrace: 100 * time.Millisecond,
		DrainTimeout: time.Second,
		// Room for the result of a call the RPC's deadline ended on a
		// loaded machine under -race (the default is 50ms).
		DeadlineMargin: 300 * time.Millisecond,
	}, engine.Deps{
		Logger:    slog.New(slog.NewJSONHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Admission: onlyEchoForAlice,
	})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, grpcauth.Interceptors(v, slog.New(slog.DiscardHandler))...) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		close(release)
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
		stubborn.Wait()
		eng.Close()
	})
	s.client = toolwirev1.NewToolServiceClient(conn)
	return s
}

// onlyEchoForAlice lets alice call echo only, and everyone else anything.
var onlyEchoForAlice = func() *policy.Rules {
	r, err := policy.New(policy.Permissions{"alice": {Allow: []string{"echo"}}}, nil, nil)
	if err != nil {
		panic(err)
	}
	return r
}()

// as returns a context whose RPCs carry token.
func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

func callTool(id, name, args string) *toolwirev1.CallToolRequest {
	return &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: args}}
}

func resultText(r *toolwirev1.CallResult) string {
	var texts []string
	for _, c := range r.GetContent() {
		texts = append(texts, c.GetText().GetText())
	}
	return strings.Join(texts, "\n")
}

// TestCallToolResults checks what the model must see: results, never RPC
// errors, as in a batch of one.
func TestCallToolResults(t *testing.T) {
	t.Parallel()
	s := newCallToolServer(t)
	resp, err := s.client.CallTool(as(bobToken), callTool("c1", "echo", `{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &toolwirev1.CallResult{
		CallId: "c1", ToolName: "echo", StructuredContent: `{"text":"hi"}`, OriginalSize: 15,
		Content: []*toolwirev1.Content{{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: "hi"}}}},
	}
	if diff := cmp.Diff(want, resp.GetResult(), protocmp.Transform(), protocmp.IgnoreFields(&toolwirev1.CallResult{}, "duration")); diff != "" {
		t.Errorf("echo's result (-want +got):\n%s", diff)
	}
	if resp.GetResult().GetDuration() == nil {
		t.Error("echo's result has no duration")
	}

	for _, tc := range []struct {
		name string
		req  *toolwirev1.CallToolRequest
		kind toolwirev1.ErrorKind
		text string // a substring of the result's text
	}{
		{"unknown tool", callTool("c2", "nope", `{}`), toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL, `unknown tool "nope". Registered tools: block, count, echo, fail, sleep, stubborn`},
		{"not JSON", callTool("c3", "echo", `{"text":`), toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS, `invalid arguments for "echo"`},
		{"against the schema", callTool("c4", "echo", `{"text":7}`), toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS, "/text"},
		{"tool error", callTool("c5", "fail", `{"message":"disk full"}`), toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR, "disk full"},
		{"wrapper", callTool("c6", "multi_tool_use.parallel", `{"tool_uses":[]}`), toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL, "Call each tool directly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := s.client.CallTool(as(bobToken), tc.req)
			if err != nil {
				t.Fatalf("CallTool: %v; want a result", err)
			}
			r := resp.GetResult()
			if !r.GetIsError() || r.GetErrorKind() != tc.kind || !strings.Contains(resultText(r), tc.text) || r.GetCallId() != tc.req.GetCall().GetCallId() {
				t.Errorf("result %v %v %q; want is_error, %v and a text with %q", r.GetCallId(), r.GetErrorKind(), resultText(r), tc.kind, tc.text)
			}
		})
	}

	t.Run("progress is not sent, the result is", func(t *testing.T) {
		t.Parallel()
		resp, err := s.client.CallTool(as(bobToken), callTool("c7", "sleep", `{"ms":250}`))
		if err != nil || resp.GetResult().GetIsError() || !strings.Contains(resultText(resp.GetResult()), "slept_ms") {
			t.Errorf("sleep: %v, %v", resp, err)
		}
	})
}

// TestCallToolMalformed checks that what the runtime must fix is an
// INVALID_ARGUMENT status, by the checks ExecuteBatch makes, and that
// nothing runs.
func TestCallToolMalformed(t *testing.T) {
	t.Parallel()
	s := newCallToolServer(t)
	long := strings.Repeat("k", engine.MaxIDBytes+1)
	for _, tc := range []struct {
		name string
		req  *toolwirev1.CallToolRequest
		msg  string
	}{
		{"no call", &toolwirev1.CallToolRequest{}, "the request has no call"},
		{"empty call_id", callTool("", "count", `{}`), "call 0 has an empty call_id"},
		{"call_id too long", callTool(long, "count", `{}`), "call_id"},
		{"idempotency_key too long", &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "a", Name: "count", IdempotencyKey: long}}, "idempotency_key"},
		{"session_id too long", &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "a", Name: "count"}, SessionId: long}, "session_id"},
		{"negative timeout", &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "a", Name: "count", Timeout: durationpb.New(-time.Second)}}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := s.client.CallTool(as(bobToken), tc.req)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("CallTool: %v; want INVALID_ARGUMENT saying %q", err, tc.msg)
			}
		})
	}
	if n := s.runs.Load(); n != 0 {
		t.Errorf("count ran %d times for malformed calls", n)
	}
}

// TestCallToolDeadlines checks the call's own timeout and the RPC's
// deadline: the call times out before the RPC does, less the margin, so
// its result still reaches the client.
func TestCallToolDeadlines(t *testing.T) {
	t.Parallel()
	s := newCallToolServer(t)
	t.Run("call timeout", func(t *testing.T) {
		t.Parallel()
		req := callTool("t1", "sleep", `{"ms":60000}`)
		req.Call.Timeout = durationpb.New(50 * time.Millisecond)
		resp, err := s.client.CallTool(as(bobToken), req)
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.GetResult(); r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(resultText(r), "timed out after 50ms") {
			t.Errorf("result %v %q; want TIMEOUT after 50ms", r.GetErrorKind(), resultText(r))
		}
	})
	t.Run("RPC deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(as(bobToken), time.Second)
		defer cancel()
		resp, err := s.client.CallTool(ctx, callTool("t2", "sleep", `{"ms":60000}`))
		if err != nil {
			t.Fatalf("CallTool: %v; want a TIMEOUT result before the deadline", err)
		}
		if r := resp.GetResult(); r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(resultText(r), "the client's deadline") {
			t.Errorf("result %v %q; want TIMEOUT by the client's deadline", r.GetErrorKind(), resultText(r))
		}
	})
	t.Run("abandoned", func(t *testing.T) {
		t.Parallel()
		// A tool that ignores its cancellation does not hold the RPC: its
		// result is returned after the abandon grace.
		req := callTool("t3", "stubborn", `{}`)
		req.Call.Timeout = durationpb.New(50 * time.Millisecond)
		start := time.Now()
		resp, err := s.client.CallTool(as(bobToken), req)
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.GetResult(); r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(resultText(r), "abandoned") {
			t.Errorf("result %v %q; want TIMEOUT, abandoned", r.GetErrorKind(), resultText(r))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the abandoned call took %s", d)
		}
	})
}

// TestCallToolClientCancels checks that a client's cancellation reaches
// the running tool's context.
func TestCallToolClientCancels(t *testing.T) {
	t.Parallel()
	s := newCallToolServer(t)
	ctx, cancel := context.WithCancel(as(bobToken))
	errc := make(chan error, 1)
	go func() {
		_, err := s.client.CallTool(ctx, callTool("b", "block", `{}`))
		errc <- err
	}()
	select {
	case <-s.entered:
	case <-time.After(time.Until(testenv.Deadline(t))):
		t.Fatal("block was not called")
	}
	cancel()
	select {
	case err := <-s.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("block's context ended with %v; want context.Canceled", err)
		}
	case <-time.After(time.Until(testenv.Deadline(t))):
		t.Fatal("the tool's context did not end after the client cancelled")
	}
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Errorf("CallTool: %v; want CANCELLED", err)
	}
	waitFor(t, func() bool {
		return strings.Contains(s.log.String(), `"call_id":"b","tool":"block","outcome":"cancelled"`)
	})
}

// waitFor polls cond, failing the test just before its own deadline: what
// it waits for must happen, and a fixed bound (it was 5s) is one a loaded
// machine can outlast.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := testenv.Deadline(t)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met by the test's deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCallToolIdempotency checks that a call sent again with its key is
// replayed, not run, and that the key with other arguments is a conflict.
func TestCallToolIdempotency(t *testing.T) {
	t.Parallel()
	s := newCallToolServer(t)
	keyed := func(id, args string) *toolwirev1.CallToolRequest {
		req := callTool(id, "count", args)
		req.Call.IdempotencyKey = "key-1"
		return req
	}
	first, err := s.client.CallTool(as(bobToken), keyed("k1", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.client.CallTool(as(bobToken), keyed("k2", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := again.GetResult(); !r.GetReplayed() || resultText(r) != resultText(first.GetResult()) || r.GetCallId() != "k2" {
		t.Errorf("second call: replayed %v, text %q, call_id %q; want replayed, %q, k2", r.GetReplayed(), resultText(r), r.GetCallId(), resultText(first.GetResult()))
	}
	if first.GetResult().GetReplayed() {
		t.Error("the first call says it was replayed")
	}
	conflict, err := s.client.CallTool(as(bobToken), keyed("k3", `{"other":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if k := conflict.GetResult().GetErrorKind(); k != toolwirev1.ErrorKind_ERROR_KIND_IDEMPOTENCY_CONFLICT {
		t.Errorf("same key, other arguments: %v; want IDEMPOTENCY_CONFLICT", k)
	}
	if n := s.runs.Load(); n != 1 {
		t.Errorf("count ran %d times; want once", n)
	}
}

// TestCallToolAuth checks that an unauthenticated call is refused before
// anything runs, and that the permissions of the authenticated caller
// apply: a refused call is a NOT_PERMITTED result, and runs nothing.
func TestCallToolAuth(t *testing.T) {
	t.Parallel()
	s := newCallToolServer(t)
	for _, ctx := range []context.Context{context.Background(), as("wrong-token-0123456789abcdef")} {
		if _, err := s.client.CallTool(ctx, callTool("a1", "count", `{}`)); status.Code(err) != codes.Unauthenticated {
			t.Errorf("CallTool without a valid token: %v; want UNAUTHENTICATED", err)
		}
	}
	resp, err := s.client.CallTool(as(aliceToken), callTool("a2", "count", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResult(); r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED || !strings.Contains(resultText(r), "Nothing was run") {
		t.Errorf("alice calling count: %v %q; want NOT_PERMITTED", r.GetErrorKind(), resultText(r))
	}
	resp, err = s.client.CallTool(as(aliceToken), callTool("a3", "echo", `{"text":"mine"}`))
	if err != nil || resultText(resp.GetResult()) != "mine" {
		t.Errorf("alice calling echo: %v, %v", resp, err)
	}
	if n := s.runs.Load(); n != 0 {
		t.Errorf("count ran %d times; want never", n)
	}
}
