package connectserve_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// TestDetachedBatch: over Connect, a detached batch outlives its request;
// AttachBatch on another client resumes after the seq it names, CancelBatch
// ends it, and another caller finds neither.
func TestDetachedBatch(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{DrainTimeout: time.Second}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close)
	alice := surfacetest.Caller{Name: "alice", Token: token}
	bob := surfacetest.Caller{Name: "bob", Token: "bob-token-0123456789abc"}
	url := serveSurface(t, eng, reg, []surfacetest.Caller{alice, bob}, httpserve.Config{})
	client := func() toolwirev1connect.ToolServiceClient {
		return toolwirev1connect.NewToolServiceClient(httpClient(t, false), url)
	}
	as := func(c surfacetest.Caller, r connect.AnyRequest) {
		r.Header().Set("Authorization", "Bearer "+c.Token)
	}

	ctx, cancel := context.WithCancel(context.Background())
	req := connect.NewRequest(&toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{{CallId: "s", Name: "sleep", Arguments: `{"ms":60000}`}},
		Options: &toolwirev1.BatchOptions{Detach: true},
	})
	as(alice, req)
	stream, err := client().ExecuteBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no BatchAccepted: %v", stream.Err())
	}
	id := stream.Msg().GetAccepted().GetBatchId()
	cancel() // the client goes away
	for stream.Receive() {
	}
	stream.Close()

	attach := func(c surfacetest.Caller, after uint64) ([]*toolwirev1.ExecuteBatchResponse, error) {
		r := connect.NewRequest(&toolwirev1.AttachBatchRequest{BatchId: id, AfterSeq: after})
		as(c, r)
		s, err := client().AttachBatch(context.Background(), r)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		var evs []*toolwirev1.ExecuteBatchResponse
		for s.Receive() {
			evs = append(evs, s.Msg())
		}
		return evs, s.Err()
	}
	if _, err := attach(bob, 0); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("AttachBatch as another caller: %v, want not_found", err)
	}
	cr := connect.NewRequest(&toolwirev1.CancelBatchRequest{BatchId: id, Reason: "enough"})
	as(bob, cr)
	if _, err := client().CancelBatch(context.Background(), cr); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("CancelBatch as another caller: %v, want not_found", err)
	}

	// Attached (its first event read), then cancelled from another client.
	r := connect.NewRequest(&toolwirev1.AttachBatchRequest{BatchId: id, AfterSeq: 0})
	as(alice, r)
	s, err := client().AttachBatch(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() || s.Msg().GetSeq() != 1 || s.Msg().GetAccepted().GetBatchId() != id {
		t.Fatalf("AttachBatch after 0 began with %v (%v), want BatchAccepted, seq 1", s.Msg(), s.Err())
	}
	cr = connect.NewRequest(&toolwirev1.CancelBatchRequest{BatchId: id, Reason: "enough"})
	as(alice, cr)
	if _, err := client().CancelBatch(context.Background(), cr); err != nil {
		t.Fatalf("CancelBatch: %v", err)
	}
	want := uint64(2)
	var last *toolwirev1.ExecuteBatchResponse
	for s.Receive() {
		if last = s.Msg(); last.GetSeq() != want {
			t.Fatalf("event %v has seq %d, want %d", last, last.GetSeq(), want)
		}
		want++
	}
	if err := s.Err(); err != nil {
		t.Fatalf("AttachBatch: %v", err)
	}
	if last.GetFinished().GetCancelled() != 1 {
		t.Errorf("last event %v, want BatchFinished counting 1 cancelled", last)
	}
}
