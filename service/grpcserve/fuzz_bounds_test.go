package grpcserve

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzBatchNearTheLimits sends batches whose IDs, names, keys, arguments,
// call counts and outputs sit around the server's limits, over a real socket
// with the server's own message limits, and checks invariants 1 and 11: a
// batch is either refused up front (INVALID_ARGUMENT, or RESOURCE_EXHAUSTED
// for a request over the message limit) or every call gets exactly one
// result, nothing follows it, the stream ends with BatchFinished, and every
// event keeps to max_result_bytes.
func FuzzBatchNearTheLimits(f *testing.F) {
	const (
		maxCalls  = 16
		maxArgs   = 16 << 10
		maxResult = 4 << 10
		maxMsg    = 256 << 10
	)
	// calls, idLen, nameLen, keyLen, argLen, out, tool
	f.Add(uint8(1), uint16(1), uint32(0), uint16(0), uint32(0), uint32(0), uint8(0))
	f.Add(uint8(16), uint16(256), uint32(128), uint16(256), uint32(maxArgs-20), uint32(maxResult), uint8(1))
	f.Add(uint8(17), uint16(10), uint32(0), uint16(0), uint32(0), uint32(0), uint8(2))
	f.Add(uint8(2), uint16(257), uint32(0), uint16(0), uint32(0), uint32(0), uint8(3))
	f.Add(uint8(2), uint16(3), uint32(0), uint16(257), uint32(0), uint32(0), uint8(4))
	f.Add(uint8(3), uint16(3), uint32(129), uint16(0), uint32(0), uint32(0), uint8(7))
	f.Add(uint8(1), uint16(3), uint32(200<<10), uint16(0), uint32(0), uint32(0), uint8(7))
	f.Add(uint8(1), uint16(3), uint32(300<<10), uint16(0), uint32(0), uint32(0), uint8(7))
	f.Add(uint8(4), uint16(3), uint32(0), uint16(0), uint32(maxArgs+1), uint32(0), uint8(0))
	f.Add(uint8(8), uint16(200), uint32(0), uint16(0), uint32(0), uint32(300_000), uint8(1))
	f.Add(uint8(8), uint16(3), uint32(0), uint16(0), uint32(0), uint32(300_000), uint8(2))
	f.Add(uint8(4), uint16(3), uint32(0), uint16(100), uint32(0), uint32(70_000), uint8(6))
	f.Add(uint8(4), uint16(3), uint32(0), uint16(0), uint32(0), uint32(100_000), uint8(4))
	f.Add(uint8(2), uint16(3), uint32(0), uint16(0), uint32(maxArgs-100), uint32(0), uint8(5))
	f.Add(uint8(16), uint16(3), uint32(0), uint16(0), uint32(0), uint32(20_000), uint8(6))

	s := newServedServer(f, engine.Config{
		MaxCallsPerBatch: maxCalls,
		MaxArgumentBytes: maxArgs,
		MaxResultBytes:   maxResult,
		MaxCallTimeout:   200 * time.Millisecond,
		AbandonGrace:     10 * time.Millisecond,
		MaxMessageBytes:  maxMsg,
	}, boundsTools()...)
	ts := &testServer{client: s.client(f, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg)))}
	toolNames := []string{"echo", "flood", "loud", "panic_big", "error_big", "echo_schema", "blocks", "long"}

	f.Fuzz(func(t *testing.T, calls uint8, idLen uint16, nameLen uint32, keyLen uint16, argLen uint32, out uint32, tool uint8) {
		n := 1 + int(calls)%(maxCalls+2)
		req := &toolwirev1.ExecuteBatchRequest{}
		for j := range n {
			c := &toolwirev1.ToolCall{CallId: fmt.Sprint(j) + strings.Repeat("i", int(idLen)%600)}
			name := toolNames[(int(tool)+j)%len(toolNames)]
			arg := fmt.Sprintf(`{"n":%d}`, out%(2<<20))
			switch name {
			case "echo":
				arg = `{"text":"` + strings.Repeat("a", int(argLen)%(maxArgs+64)) + `"}`
			case "echo_schema": // a schema error quoting an unknown property
				name, arg = "echo", `{"text":"x","`+strings.Repeat("p", int(argLen)%(maxArgs+64))+`":1}`
			case "blocks": // cheaper, and past the message limit from 60,000 on
				arg = fmt.Sprintf(`{"n":%d}`, out%100_000)
			case "long":
				name = strings.Repeat("x", 1+int(nameLen)%(400<<10))
			}
			c.Name, c.Arguments = name, arg
			if keyLen%2 == 1 {
				c.IdempotencyKey = fmt.Sprint(j) + strings.Repeat("k", int(keyLen)%600)
			}
			req.Calls = append(req.Calls, c)
		}
		checkErr := s.srv.engine.Check(req)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		events, err := ts.runErr(ctx, req)
		switch {
		case proto.Size(req) > maxMsg:
			if status.Code(err) != codes.ResourceExhausted || len(events) != 0 {
				t.Fatalf("a request of %d bytes: %v after %d events; want RESOURCE_EXHAUSTED up front", proto.Size(req), err, len(events))
			}
			return
		case checkErr != nil:
			if status.Code(err) != codes.InvalidArgument || len(events) != 0 || len(status.Convert(err).Message()) > 500 {
				t.Fatalf("rejected batch (%v): %.500v after %d events; want a short INVALID_ARGUMENT up front", checkErr, err, len(events))
			}
			return
		case err != nil:
			t.Fatalf("accepted batch failed after %d events: %v", len(events), err)
		}
		if len(events) < 2 || events[0].GetAccepted() == nil || events[len(events)-1].GetFinished() == nil {
			t.Fatalf("stream does not start with BatchAccepted and end with BatchFinished (%d events)", len(events))
		}
		got := results(t, events)
		if len(got) != n {
			t.Fatalf("%d results for %d calls", len(got), n)
		}
		answered := map[string]bool{}
		for _, ev := range events {
			if id := ev.GetStarted().GetCallId() + ev.GetProgress().GetCallId(); answered[id] {
				t.Fatalf("call %.40q: an event after its result", id)
			}
			if r := ev.GetResult(); r != nil {
				answered[r.GetCallId()] = true
			}
		}
		checkBounded(t, events, maxResult)
	})
}

// boundsTools are tools whose output and failures are as large as a test
// asks.
func boundsTools() []tools.Tool {
	nSchema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
	n := func(call *tools.Call) int {
		var a struct{ N int }
		_ = json.Unmarshal(call.Arguments, &a)
		return a.N
	}
	return []tools.Tool{
		{Name: "panic_big", Description: "panics with n bytes", InputSchema: nSchema,
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) { panic(strings.Repeat("p", n(call))) }},
		{Name: "error_big", Description: "fails with n bytes", InputSchema: nSchema,
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				return nil, fmt.Errorf("failed: %s", strings.Repeat("e", n(call)))
			}},
		{Name: "loud", Description: "reports progress of n bytes, message and output", InputSchema: nSchema, Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				call.Report(tools.Progress{Message: strings.Repeat("m", n(call)), Output: strings.Repeat("o", n(call))})
				call.Output(strings.Repeat("é", n(call)))
				return tools.Text("said"), nil
			}},
		{Name: "flood", Description: "returns n bytes each of text, image and details", InputSchema: nSchema, Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				n := n(call)
				return &tools.Result{Content: []tools.Content{{Text: strings.Repeat("t", n)}, {Data: make([]byte, n), MIMEType: "image/png"}},
					Details: json.RawMessage(`"` + strings.Repeat("d", n) + `"`)}, nil
			}},
		{Name: "blocks", Description: "returns n empty text blocks", InputSchema: nSchema, Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, call *tools.Call) (*tools.Result, error) {
				return &tools.Result{Content: make([]tools.Content, n(call))}, nil
			}},
	}
}

// checkBounded fails the test for any event of events over limit bytes of
// output (a result besides its marker, a progress report's message and
// output) or with a marker over 300 bytes.
func checkBounded(tb testing.TB, events []*toolwirev1.ExecuteBatchResponse, limit int) {
	tb.Helper()
	const maxMarker = 300
	for _, ev := range events {
		if r := ev.GetResult(); r != nil {
			if p := payload(r); p > limit {
				tb.Errorf("call %.40q: a result of %d bytes (%.100q), over the %d-byte limit", r.GetCallId(), p, text(r), limit)
			}
			if r.GetTruncated() {
				if m := r.GetContent()[len(r.GetContent())-1].GetText().GetText(); len(m) > maxMarker || !strings.HasPrefix(m, "[output truncated") {
					tb.Errorf("call %.40q: marker %.400q", r.GetCallId(), m)
				}
			}
			if len(r.GetCallId()) > engine.MaxIDBytes || len(r.GetToolName()) > engine.MaxNameBytes {
				tb.Errorf("result echoes a call_id of %d bytes, a tool_name of %d", len(r.GetCallId()), len(r.GetToolName()))
			}
		}
		if p := ev.GetProgress(); p != nil && len(p.GetMessage())+len(p.GetOutput()) > limit+2*maxMarker {
			tb.Errorf("call %.40q: progress of %d+%d bytes, over the %d-byte limit", p.GetCallId(), len(p.GetMessage()), len(p.GetOutput()), limit)
		}
	}
}

// payload is the size of res's output besides a truncation marker, as the
// engine's result shaping counts it.
func payload(res *toolwirev1.CallResult) int {
	blocks := res.GetContent()
	if res.GetTruncated() && len(blocks) > 0 {
		blocks = blocks[:len(blocks)-1] // the marker
	}
	n := len(res.GetStructuredContent()) + len(res.GetDetails())
	for _, c := range blocks {
		n += len(c.GetText().GetText()) + len(c.GetImage().GetData())
	}
	return n
}
