package service

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func batchOf(calls ...*toolwirev1.ToolCall) *toolwirev1.ExecuteBatchRequest {
	return &toolwirev1.ExecuteBatchRequest{Calls: calls}
}

func TestBatchBeyondTheCallCapQueuesThenRuns(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{MaxConcurrentCalls: 1, MaxQueueWait: time.Hour})
	c := s.client(t)
	first := startBatch(t, context.Background(), c, batchOf(call("a", "hold", "")))

	second := make(chan error, 1)
	var secondEvents []*toolwirev1.ExecuteBatchResponse
	go func() {
		var err error
		secondEvents, err = (&testServer{client: c}).runErr(context.Background(), batchOf(call("b", "echo", `{"text":"queued"}`)))
		second <- err
	}()
	waitFor(t, func() bool { return s.srv.engine.Stats().SlotWaiters == 1 })
	select {
	case err := <-second:
		t.Fatalf("second batch ended while the only slot was taken: %v", err)
	default:
	}

	s.hold.releaseAll()
	if _, err := drain(first); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("queued batch: %v", err)
	}
	if r := results(t, secondEvents)["b"]; r.GetIsError() || text(r) != "queued" {
		t.Errorf("queued call's result = %v, want echo's text", r)
	}
}

func TestBatchBeyondTheCallCapIsRefusedAfterMaxQueueWait(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{MaxConcurrentCalls: 1, MaxQueueWait: 10 * time.Millisecond})
	c := s.client(t)
	first := startBatch(t, context.Background(), c, batchOf(call("a", "hold", "")))

	_, err := (&testServer{client: c}).runErr(context.Background(), batchOf(call("b", "echo", `{}`)))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limit of 1 concurrent calls") {
		t.Errorf("batch beyond the cap: err = %v, want RESOURCE_EXHAUSTED naming the limit", err)
	}

	s.hold.releaseAll()
	events, err := drain(first)
	if err != nil || results(t, events)["a"].GetIsError() {
		t.Errorf("the running batch was disturbed: %v %v", err, events)
	}
}

func TestCallOfAnAcceptedBatchWaitingTooLongForASlotTimesOutUnrun(t *testing.T) {
	t.Parallel()
	// One slot, two calls in one parallel lane: whichever runs first holds
	// the slot past its timeout (its tool ignores cancellation and the
	// abandon grace is long), so the other's wait for a slot times out.
	s := newServedServer(t, engine.Config{AbandonGrace: time.Hour, MaxConcurrentCalls: 1})
	c := s.client(t)
	timeout := durationpb.New(20 * time.Millisecond)
	req := batchOf(
		&toolwirev1.ToolCall{CallId: "x", Name: "hold_stubborn", Timeout: timeout},
		&toolwirev1.ToolCall{CallId: "y", Name: "hold_stubborn", Timeout: timeout})
	stream, err := c.ExecuteBatch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var waited *toolwirev1.CallResult
	for waited == nil {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended before a result: %v", err)
		}
		waited = ev.GetResult()
	}
	ran := <-s.hold.started
	if waited.GetCallId() == ran {
		t.Fatalf("the first result is of the running call %q", ran)
	}
	if waited.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(text(waited), "waiting") || !strings.Contains(text(waited), "Nothing was run") {
		t.Errorf("waiting call's result = %v, want TIMEOUT saying it waited for a slot and did not run", waited)
	}
	s.hold.releaseAll()
	rest, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	if r := results(t, rest)[ran]; r == nil || r.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT && strings.Contains(text(r), "waiting") {
		t.Errorf("running call's result = %v", r)
	}
	select {
	case id := <-s.hold.started:
		t.Errorf("call %q ran after its wait for a slot timed out", id)
	default:
	}
}

func TestPerCallerCapLeavesOtherCallersAlone(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{MaxConcurrentCalls: 10, MaxCallsPerCaller: 1, MaxQueueWait: 10 * time.Millisecond})
	c := s.client(t)
	alice := startBatch(t, as("alice"), c, batchOf(call("a1", "hold", "")))

	_, err := (&testServer{client: c}).runErr(as("alice"), batchOf(call("a2", "echo", `{}`)))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "this caller is running its limit of 1") {
		t.Errorf("alice's second batch: err = %v, want RESOURCE_EXHAUSTED for the per-caller limit", err)
	}
	bob := startBatch(t, as("bob"), c, batchOf(call("b1", "hold", "")))

	s.hold.releaseAll()
	for name, stream := range map[string]grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse]{"alice": alice, "bob": bob} {
		if _, err := drain(stream); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	waitFor(t, func() bool {
		return s.srv.engine.Stats().Callers == 0
	})
}

func TestMessageOverTheSizeLimitIsResourceExhausted(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{MaxMessageBytes: 64 << 10})
	c := s.client(t)
	big := `{"text":"` + strings.Repeat("x", 100<<10) + `"}`
	_, err := (&testServer{client: c}).runErr(context.Background(), batchOf(call("a", "echo", big)))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized batch: err = %v, want RESOURCE_EXHAUSTED", err)
	}
	events, err := (&testServer{client: c}).runErr(context.Background(), batchOf(call("a", "echo", `{"text":"small"}`)))
	if err != nil || text(results(t, events)["a"]) != "small" {
		t.Errorf("batch under the limit after an oversized one: %v %v", err, events)
	}
}

func TestClientPingingTooOftenIsSentTooManyPings(t *testing.T) {
	t.Parallel()
	s := newServedSurface(t, engine.Config{}, Config{Limits: Limits{KeepaliveMinTime: time.Hour}})
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The first ping is allowed; each later one within MinTime is a strike,
	// and the third strike ends the connection.
	for i := range 5 {
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeEnhanceYourCalm || string(f.DebugData()) != "too_many_pings" {
				t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", f.ErrCode, f.DebugData())
			}
			if _, err := fr.ReadFrame(); err == nil {
				for err == nil { // the connection must close after the GOAWAY
					_, err = fr.ReadFrame()
				}
			}
			return
		}
	}
}

func TestMaxConnectionAgeMakesClientsReconnect(t *testing.T) {
	t.Parallel()
	s := newServedSurface(t, engine.Config{}, Config{Limits: Limits{MaxConnectionAge: 20 * time.Millisecond, MaxConnectionAgeGrace: time.Minute}})
	c := s.client(t)
	for s.accepts.Load() < 3 {
		if t.Context().Err() != nil {
			t.Fatal("no reconnection")
		}
		if _, err := c.ListTools(context.Background(), &toolwirev1.ListToolsRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("ListTools across connection ages: %v", err)
		}
	}
}
