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
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// serveTCP serves a new engine over the diag tools on a real loopback
// socket and returns a function that dials a new connection to it.
func serveTCP(tb testing.TB, admission ...engine.Admission) (dial func() toolwirev1.ToolServiceClient) {
	tb.Helper()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		tb.Fatal(err)
	}
	deps := engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if len(admission) > 0 {
		deps.Admission = admission[0]
	}
	eng := engine.New(engine.Config{}, deps)
	srv, err := New(eng, reg, Config{})
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	var conns []*grpc.ClientConn
	tb.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		eng.CancelCalls()
		eng.Drain()
		gs.Stop()
		eng.Close()
	})
	return func() toolwirev1.ToolServiceClient {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			tb.Fatal(err)
		}
		conns = append(conns, conn)
		return toolwirev1.NewToolServiceClient(conn)
	}
}

// TestDetachedBatchOverTCP: a detached batch's client goes away after
// CallStarted; AttachBatch on another connection gets every event after
// the seq it names exactly once, the result and BatchFinished.
func TestDetachedBatchOverTCP(t *testing.T) {
	dial := serveTCP(t)
	ctx, cancel := context.WithCancel(context.Background())
	req := &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{call("s", "sleep", `{"ms":1500}`), call("e", "echo", `{"text":"after"}`)},
		Options: &toolwirev1.BatchOptions{Detach: true},
	}
	stream, err := dial().ExecuteBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var seen []*toolwirev1.ExecuteBatchResponse
	for len(seen) == 0 || seen[len(seen)-1].GetStarted() == nil {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended before a call started: %v", err)
		}
		seen = append(seen, ev)
	}
	cancel() // the client disconnects after CallStarted
	if _, err := drain(stream); status.Code(err) != codes.Canceled {
		t.Fatalf("the first stream ended with %v, want Canceled", err)
	}
	id := seen[0].GetAccepted().GetBatchId()
	last := seen[len(seen)-1].GetSeq()

	other := dial()
	if _, err := drainAttach(other, "no-such-batch", 0); status.Code(err) != codes.NotFound {
		t.Fatalf("AttachBatch of no batch: %v, want NotFound", err)
	}
	events, err := drainAttach(other, id, last)
	if err != nil {
		t.Fatalf("AttachBatch: %v", err)
	}
	want := last + 1
	for _, ev := range events {
		if ev.GetSeq() != want {
			t.Fatalf("event %v has seq %d, want %d: every event after %d exactly once, in order", ev, ev.GetSeq(), want, last)
		}
		want++
	}
	rs := results(t, events)
	if rs["s"].GetIsError() || text(rs["e"]) != "after" {
		t.Errorf("results %v, want both calls to succeed", rs)
	}
	if f := events[len(events)-1].GetFinished(); f.GetSucceeded() != 2 {
		t.Errorf("last event %v, want BatchFinished with 2 succeeded", events[len(events)-1])
	}
	if _, err := other.CancelBatch(context.Background(), &toolwirev1.CancelBatchRequest{BatchId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("CancelBatch of an ended batch: %v, want NotFound", err)
	}
	got, err := other.GetBatch(context.Background(), &toolwirev1.GetBatchRequest{BatchId: id})
	if err != nil {
		t.Fatalf("GetBatch: %v", err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_FINISHED || len(got.GetResults()) != 2 || got.GetLastSeq() != want-1 {
		t.Errorf("GetBatch = %v, want FINISHED, 2 results, last_seq %d", got, want-1)
	}
	if _, err := other.GetBatch(context.Background(), &toolwirev1.GetBatchRequest{BatchId: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetBatch of no batch: %v, want NotFound", err)
	}
}

// TestDetachedBatchOutlivesItsRPCDeadline: a detached batch's RPC
// deadline bounds its stream, not its calls (docs/batches.md): the stream
// ends DEADLINE_EXCEEDED while the call runs on, and an attachment gets
// its result, run to its end, not a TIMEOUT.
func TestDetachedBatchOutlivesItsRPCDeadline(t *testing.T) {
	dial := serveTCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	stream, err := dial().ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{call("s", "sleep", `{"ms":2500}`)},
		Options: &toolwirev1.BatchOptions{Detach: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("no BatchAccepted before the RPC's deadline: %v", err)
	}
	if _, err := drain(stream); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("the stream ended with %v, want DeadlineExceeded", err)
	}
	events, err := drainAttach(dial(), first.GetAccepted().GetBatchId(), 0)
	if err != nil {
		t.Fatalf("AttachBatch: %v", err)
	}
	if r := results(t, events)["s"]; r == nil || r.GetIsError() {
		t.Errorf("the call's result %v; want it run to its end, past the RPC's deadline", r)
	}
}

// TestCancelBatchOverTCP: CancelBatch on another connection ends a
// detached batch's calls with CANCELLED results, seen by its attachment.
func TestCancelBatchOverTCP(t *testing.T) {
	dial := serveTCP(t)
	req := &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{call("s", "sleep", `{"ms":60000}`)},
		Options: &toolwirev1.BatchOptions{Detach: true},
	}
	stream, err := dial().ExecuteBatch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial().CancelBatch(context.Background(), &toolwirev1.CancelBatchRequest{BatchId: first.GetAccepted().GetBatchId(), Reason: "the user pressed stop"}); err != nil {
		t.Fatalf("CancelBatch: %v", err)
	}
	events, err := drain(stream)
	if err != nil {
		t.Fatalf("the batch's stream: %v", err)
	}
	r := results(t, events)["s"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "the user pressed stop") {
		t.Errorf("result %v, want CANCELLED with the reason", r)
	}
	if events[len(events)-1].GetFinished().GetCancelled() != 1 {
		t.Errorf("last event %v, want BatchFinished counting 1 cancelled", events[len(events)-1])
	}
}

// drainAttach reads a whole AttachBatch stream.
func drainAttach(client toolwirev1.ToolServiceClient, id string, after uint64) ([]*toolwirev1.ExecuteBatchResponse, error) {
	s, err := client.AttachBatch(context.Background(), &toolwirev1.AttachBatchRequest{BatchId: id, AfterSeq: after})
	if err != nil {
		return nil, err
	}
	return drain(s)
}

// TestResolveApprovalOverTCP: a held call is announced on the stream and
// denied through ResolveApproval on another connection (authentication
// off: the anonymous caller may approve); a call not waiting is NotFound.
func TestResolveApprovalOverTCP(t *testing.T) {
	rules, err := policy.New(nil, nil, []policy.ApprovalRule{{Tools: []string{"echo"}, Reason: "echo needs a nod"}})
	if err != nil {
		t.Fatal(err)
	}
	dial := serveTCP(t, rules)
	stream, err := dial().ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("e", "echo", `{"text":"hi"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("no CallAwaitingApproval: %v", err)
		}
		if a := ev.GetAccepted(); a != nil {
			id = a.GetBatchId()
		}
		if a := ev.GetAwaitingApproval(); a != nil {
			if a.GetReason() != "echo needs a nod" || a.GetToolName() != "echo" {
				t.Errorf("CallAwaitingApproval %v", a)
			}
			break
		}
	}
	other := dial()
	if _, err := other.ResolveApproval(context.Background(), &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: "nope", Approved: true}); status.Code(err) != codes.NotFound {
		t.Errorf("ResolveApproval of a call not waiting: %v, want NotFound", err)
	}
	if _, err := other.ResolveApproval(context.Background(), &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: "e", Message: "not now", Approver: "me"}); err != nil {
		t.Fatalf("ResolveApproval: %v", err)
	}
	events, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	if r := results(t, events)["e"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_DENIED || text(r) != "not now" {
		t.Errorf("result %v, want DENIED, not now", r)
	}
}
