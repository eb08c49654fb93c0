package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

// testTimeout bounds waits for things that must happen; it only fails a
// test that would otherwise hang.
const testTimeout = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestListTools(t *testing.T) {
	t.Parallel()
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			c := newTestServer(t, transport, nil)
			resp, err := c.ListTools(testContext(t))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range resp.GetTools() {
				names = append(names, tool.GetName())
			}
			if diff := cmp.Diff([]string{"echo", "fail", "sleep"}, names); diff != "" {
				t.Errorf("tool names (-want +got):\n%s", diff)
			}
			if resp.GetRevision() == "" {
				t.Error("empty revision")
			}
		})
	}
}

// gated returns a read-only tool that returns "opened" once open is closed.
func gated(name string, open <-chan struct{}) tools.Tool {
	return tools.Tool{
		Name:        name,
		Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			select {
			case <-open:
				return tools.Text("opened"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

// observe passes seq through, calling f with each event.
func observe(seq iter.Seq2[*toolwirev1.ExecuteBatchResponse, error], f func(*toolwirev1.ExecuteBatchResponse)) iter.Seq2[*toolwirev1.ExecuteBatchResponse, error] {
	return func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for ev, err := range seq {
			if err == nil {
				f(ev)
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

// TestCollectRestoresBatchOrder makes the first call of a parallel lane
// finish after the second, deterministically: its tool waits until the
// client has seen the other's result. fail, not read-only, runs in a lane of
// its own after them.
func TestCollectRestoresBatchOrder(t *testing.T) {
	t.Parallel()
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			open := make(chan struct{})
			c := newTestServer(t, transport, append(diag.Tools(), gated("gate", open)))
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
				client.Call("slow", "gate", nil),
				client.Call("fast", "echo", map[string]string{"text": "fast"}),
				client.Call("broken", "fail", `{"message":"boom"}`),
			}}

			var completed []string
			b, err := client.Collect(observe(c.ExecuteBatch(testContext(t), req), func(ev *toolwirev1.ExecuteBatchResponse) {
				if r := ev.GetResult(); r != nil {
					completed = append(completed, r.GetCallId())
					if r.GetCallId() == "fast" {
						close(open)
					}
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"fast", "slow", "broken"}, completed); diff != "" {
				t.Fatalf("completion order (-want +got):\n%s", diff)
			}
			var got []string
			for _, r := range b.Results {
				got = append(got, r.GetCallId()+"="+client.Text(r))
			}
			want := []string{"slow=opened", "fast=fast", "broken=boom"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if !b.Results[2].GetIsError() || b.Results[2].GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR {
				t.Errorf("fail's result: is_error %v, kind %v; want a TOOL_ERROR", b.Results[2].GetIsError(), b.Results[2].GetErrorKind())
			}
			if b.Accepted.GetBatchId() == "" || b.Finished.GetBatchId() != b.Accepted.GetBatchId() {
				t.Errorf("batch IDs: accepted %q, finished %q", b.Accepted.GetBatchId(), b.Finished.GetBatchId())
			}
			if b.Finished.GetSucceeded() != 2 || b.Finished.GetFailed() != 1 {
				t.Errorf("finished: %d succeeded, %d failed; want 2 and 1", b.Finished.GetSucceeded(), b.Finished.GetFailed())
			}
		})
	}
}

func TestExecuteBatchRPCErrorIsYieldedOnce(t *testing.T) {
	t.Parallel()
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			c := newTestServer(t, transport, nil)
			var errs []error
			for ev, err := range c.ExecuteBatch(testContext(t), &toolwirev1.ExecuteBatchRequest{}) {
				if ev != nil {
					t.Errorf("unexpected event %v", ev)
				}
				errs = append(errs, err)
			}
			if len(errs) != 1 || status.Code(errs[0]) != codes.InvalidArgument {
				t.Fatalf("errors %v; want one INVALID_ARGUMENT", errs)
			}
			if _, err := client.Collect(c.ExecuteBatch(testContext(t), &toolwirev1.ExecuteBatchRequest{})); status.Code(err) != codes.InvalidArgument {
				t.Errorf("Collect: %v; want INVALID_ARGUMENT", err)
			}
		})
	}
}

func TestExecuteBatchUnreachable(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1 of the loopback address.
	c, err := client.New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := 0
	for _, err := range c.ExecuteBatch(testContext(t), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "echo", nil)}}) {
		n++
		if status.Code(err) != codes.Unavailable {
			t.Errorf("error %v; want UNAVAILABLE", err)
		}
	}
	if n != 1 {
		t.Errorf("%d yields; want 1", n)
	}
}

// TestBreakCancelsRPC stops reading a batch whose sleep would run for an
// hour: the tool must see its context cancelled, the server's handler must
// end with CANCELLED, and no goroutine of the RPC may be left. It does not
// run in parallel, so the goroutine check sees only its own.
func TestBreakCancelsRPC(t *testing.T) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			toolDone := make(chan error, 1)
			ts := diag.Tools()
			for i := range ts {
				if ts[i].Name == "sleep" {
					sleep := ts[i].Handler
					ts[i].Handler = func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
						res, err := sleep(ctx, call)
						toolDone <- ctx.Err()
						return res, err
					}
				}
			}
			handlerDone := make(chan error, 1)
			c := newTestServer(t, transport, ts, grpc.StreamInterceptor(
				func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
					err := handler(srv, ss)
					if info.FullMethod == toolwirev1.ToolService_ExecuteBatch_FullMethodName {
						handlerDone <- err
					}
					return err
				}))
			ctx := testContext(t)
			// Connect first, so the connection's goroutines are not counted.
			if _, err := c.ListTools(ctx); err != nil {
				t.Fatal(err)
			}
			ignore := goleak.IgnoreCurrent()

			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("long", "sleep", `{"ms":3600000}`)}}
			var seen []string
			for ev, err := range c.ExecuteBatch(ctx, req) {
				if err != nil {
					t.Fatal(err)
				}
				if p := ev.GetProgress(); p != nil {
					seen = append(seen, p.GetMessage())
					break
				}
			}
			if len(seen) != 1 || !strings.HasPrefix(seen[0], "sleeping") {
				t.Fatalf("progress %q; want the first progress of sleep", seen)
			}

			select {
			case err := <-toolDone:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("sleep's context ended with %v; want context.Canceled", err)
				}
			case <-ctx.Done():
				t.Fatal("the sleep tool was not cancelled")
			}
			select {
			case err := <-handlerDone:
				if status.Code(err) != codes.Canceled {
					t.Errorf("ExecuteBatch handler returned %v; want CANCELLED", err)
				}
			case <-ctx.Done():
				t.Fatal("the ExecuteBatch handler did not return")
			}
			// The engine keeps idle runner goroutines for later batches; they
			// belong to the server, not to the RPC, and end when it stops.
			idleRunners := goleak.IgnoreTopFunction("github.com/toolwire/toolwire/engine/internal/runners.(*Pool).loop")
			if err := goleak.Find(ignore, idleRunners); err != nil {
				t.Errorf("goroutines of the RPC left behind: %v", err)
			}
		})
	}
}

// events returns a sequence of evs followed by err, if not nil.
func events(err error, evs ...*toolwirev1.ExecuteBatchResponse) iter.Seq2[*toolwirev1.ExecuteBatchResponse, error] {
	return func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
		if err != nil {
			yield(nil, err)
		}
	}
}

func accepted(lanes ...[]string) *toolwirev1.ExecuteBatchResponse {
	a := &toolwirev1.BatchAccepted{BatchId: "b"}
	for i, ids := range lanes {
		a.Lanes = append(a.Lanes, &toolwirev1.Lane{Index: uint32(i), CallIds: ids, Parallel: len(ids) > 1})
	}
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Accepted{Accepted: a}}
}

func result(id string, index uint32, text string) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Result{Result: &toolwirev1.CallResult{
		CallId: id, Index: index,
		Content: []*toolwirev1.Content{{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: text}}}},
	}}}
}

var finished = &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Finished{Finished: &toolwirev1.BatchFinished{BatchId: "b"}}}

func TestCollect(t *testing.T) {
	t.Parallel()
	rpcErr := status.Error(codes.Unavailable, "gone")
	tests := []struct {
		name    string
		seq     iter.Seq2[*toolwirev1.ExecuteBatchResponse, error]
		want    []string // call IDs of Results, "" for nil
		wantErr string   // substring; "" means no error
	}{
		{"complete", events(nil, accepted([]string{"a", "b"}, []string{"c"}), result("b", 1, ""), result("a", 0, ""), result("c", 2, ""), finished), []string{"a", "b", "c"}, ""},
		{"no accepted", events(nil), nil, "without BatchAccepted"},
		{"no finished", events(nil, accepted([]string{"a"}), result("a", 0, "")), []string{"a"}, "without BatchFinished"},
		{"missing result", events(nil, accepted([]string{"a", "b"}), result("b", 1, ""), finished), []string{"", "b"}, `without results for calls ["a"]`},
		{"rpc error keeps partial results", events(rpcErr, accepted([]string{"a", "b"}), result("b", 1, "")), []string{"", "b"}, "gone"},
		{"index out of range", events(nil, accepted([]string{"a"}), result("a", 1, "")), []string{""}, "index 1"},
		{"unplanned call", events(nil, accepted([]string{"a"}), result("x", 0, "")), []string{""}, `"x", which is not in the plan`},
		{"duplicate result", events(nil, accepted([]string{"a"}), result("a", 0, ""), result("a", 0, "")), []string{"a"}, "second result"},
		{"result before accepted", events(nil, result("a", 0, "")), nil, "before BatchAccepted"},
		{"swapped indexes", events(nil, accepted([]string{"a", "b"}), result("a", 1, "A"), result("b", 0, "B"), finished), []string{"", ""}, `call "a" has index 1; its position in the plan is 0`},
		{"call planned twice", events(nil, accepted([]string{"a"}, []string{"a"})), nil, `lists call "a" twice`},
		{"second accepted", events(nil, accepted([]string{"a"}), accepted([]string{"a", "b"})), []string{""}, "second BatchAccepted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := client.Collect(tt.seq)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v; want one containing %q", err, tt.wantErr)
			}
			var got []string
			for _, r := range b.Results {
				got = append(got, r.GetCallId())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCollectFor: the plan is checked against the request's calls, so a
// call the plan leaves out is an error, not a shorter batch.
func TestCollectFor(t *testing.T) {
	t.Parallel()
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("a", "echo", nil), client.Call("b", "echo", nil), client.Call("c", "echo", nil),
	}}
	tests := []struct {
		name    string
		seq     iter.Seq2[*toolwirev1.ExecuteBatchResponse, error]
		want    []string // call IDs of Results, "" for nil
		wantErr string   // substring; "" means no error
	}{
		{"complete", events(nil, accepted([]string{"a", "b"}, []string{"c"}), result("c", 2, ""), result("a", 0, ""), result("b", 1, ""), finished), []string{"a", "b", "c"}, ""},
		{"plan leaves out a call", events(nil, accepted([]string{"a", "b"}), result("a", 0, ""), result("b", 1, ""), finished), []string{"", "", ""}, `leaves out calls ["c"]`},
		{"plan adds a call", events(nil, accepted([]string{"a", "b", "c", "d"})), []string{"", "", ""}, `calls ["d"] the request does not have`},
		{"plan reorders", events(nil, accepted([]string{"b", "a"}, []string{"c"})), []string{"", "", ""}, `the plan lists the calls as ["b" "a" "c"]`},
		{"swapped indexes", events(nil, accepted([]string{"a", "b", "c"}), result("a", 1, ""), result("b", 0, "")), []string{"", "", ""}, `call "a" has index 1`},
		{"missing result", events(nil, accepted([]string{"a", "b", "c"}), result("a", 0, ""), result("c", 2, ""), finished), []string{"a", "", "c"}, `without results for calls ["b"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := client.CollectFor(req, tt.seq)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v; want one containing %q", err, tt.wantErr)
			}
			var got []string
			for _, r := range b.Results {
				got = append(got, r.GetCallId())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	r := &toolwirev1.CallResult{Content: []*toolwirev1.Content{
		{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: "one"}}},
		{Block: &toolwirev1.Content_Image{Image: &toolwirev1.ImageContent{Data: []byte{1}, MimeType: "image/png"}}},
		{Block: &toolwirev1.Content_Text{Text: &toolwirev1.TextContent{Text: "two"}}},
	}}
	if got := client.Text(r); got != "one\ntwo" {
		t.Errorf("Text = %q; want %q", got, "one\ntwo")
	}
	if got := client.Text(nil); got != "" {
		t.Errorf("Text(nil) = %q; want empty", got)
	}
}

func TestCall(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args any
		want string
	}{
		{"nil", nil, ""},
		{"string passes through", `{"text": "a"}`, `{"text": "a"}`},
		{"bytes pass through", []byte(`{"x":1}`), `{"x":1}`},
		{"raw message passes through", json.RawMessage(`{"y":2}`), `{"y":2}`},
		{"map is marshalled", map[string]int{"ms": 5}, `{"ms":5}`},
		{"struct is marshalled", diag.EchoArgs{Text: "hi"}, `{"text":"hi"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := client.Call("id", "tool", tt.args)
			want := &toolwirev1.ToolCall{CallId: "id", Name: "tool", Arguments: tt.want}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Call (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("unmarshalable panics", func(t *testing.T) {
		t.Parallel()
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		client.Call("id", "tool", make(chan int))
	})
}
