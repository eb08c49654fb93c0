package service

import (
	"context"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzExecuteBatch sends arbitrary requests (as protobuf wire bytes) through
// the batch checks and, when accepted, through a real in-process server: a
// malformed batch must be INVALID_ARGUMENT, and an accepted one must give
// every call exactly one result and end with BatchFinished.
func FuzzExecuteBatch(f *testing.F) {
	seeds := []*toolwirev1.ExecuteBatchRequest{
		{},
		{Calls: []*toolwirev1.ToolCall{call("a", "echo", `{"text":"x"}`)}},
		{Calls: []*toolwirev1.ToolCall{call("a", "echo", `{"text":"x"}`), call("a", "echo", ``)}},
		{Calls: []*toolwirev1.ToolCall{call("", "echo", `{}`)}},
		{Calls: []*toolwirev1.ToolCall{call("a", "nope", `[`), call("b", "fail", `{"message":"m"}`), call("c", "write", `{"ms":1}`)},
			Options: &toolwirev1.BatchOptions{StopOnError: true, MaxParallel: 1}},
		{Calls: []*toolwirev1.ToolCall{{CallId: "t", Name: "sleep", Arguments: `{"ms":1}`, Timeout: durationpb.New(time.Millisecond)}},
			Options: &toolwirev1.BatchOptions{Sequential: true, Timeout: durationpb.New(-1)}},
		{Calls: []*toolwirev1.ToolCall{call("w", "multi_tool_use.parallel", `{"tool_uses":[]}`), call("b", "boom", ``)}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	ts := newTestServer(f, engine.Config{MaxCallsPerBatch: 16, MaxArgumentBytes: 256, MaxCallTimeout: 50 * time.Millisecond, AbandonGrace: 10 * time.Millisecond})
	f.Fuzz(func(t *testing.T, wire []byte) {
		req := &toolwirev1.ExecuteBatchRequest{}
		if proto.Unmarshal(wire, req) != nil {
			return
		}
		for _, c := range req.GetCalls() {
			if c.GetName() == "stubborn" || c.GetName() == "chatty" || c.GetName() == "big" {
				return // these wait for the test's end, flood, or allocate what they are told; covered elsewhere
			}
		}
		checkErr := ts.srv.checkBatch(req)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		events, err := ts.runErr(ctx, req)
		if checkErr != nil {
			if status.Code(checkErr) != codes.InvalidArgument || status.Code(err) != codes.InvalidArgument {
				t.Fatalf("rejected batch: check %v, RPC %v; want InvalidArgument from both", checkErr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("accepted batch failed: %v", err)
		}
		if len(events) < 2 || events[0].GetAccepted() == nil || events[len(events)-1].GetFinished() == nil {
			t.Fatalf("stream does not start with BatchAccepted and end with BatchFinished: %v", events)
		}
		got := results(t, events)
		for _, c := range req.GetCalls() {
			if got[c.GetCallId()] == nil {
				t.Fatalf("call %q has no result", c.GetCallId())
			}
		}
		if len(got) != len(req.GetCalls()) {
			t.Fatalf("%d results for %d calls", len(got), len(req.GetCalls()))
		}
	})
}
