package engine

import (
	"context"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzRun runs arbitrary requests (as protobuf wire bytes) through Check
// and Run: a malformed batch must be InvalidArgument from both, before any
// event, and an accepted one must give every call exactly one result and
// end with BatchFinished.
func FuzzRun(f *testing.F) {
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
	te := newTestBed(f, Config{MaxCallsPerBatch: 16, MaxArgumentBytes: 256, MaxCallTimeout: 50 * time.Millisecond, AbandonGrace: 10 * time.Millisecond})
	f.Fuzz(func(t *testing.T, wire []byte) {
		req := &toolwirev1.ExecuteBatchRequest{}
		if proto.Unmarshal(wire, req) != nil {
			return
		}
		for _, c := range req.GetCalls() {
			switch c.GetName() {
			case "stubborn", "hold", "hold_stubborn", "chatty", "big":
				return // these wait for the test's end, flood, or allocate what they are told; covered elsewhere
			}
		}
		checkErr := te.e.Check(req)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		events, err := te.runErr(ctx, req)
		if checkErr != nil {
			if CodeOf(checkErr) != InvalidArgument || CodeOf(err) != InvalidArgument || len(events) != 0 {
				t.Fatalf("rejected batch: check %v, Run %v after %d events; want InvalidArgument from both, no event", checkErr, err, len(events))
			}
			return
		}
		if err != nil {
			t.Fatalf("accepted batch failed: %v", err)
		}
		if len(events) < 2 || events[0].GetAccepted() == nil || events[len(events)-1].GetFinished() == nil {
			t.Fatalf("events do not start with BatchAccepted and end with BatchFinished: %v", events)
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
