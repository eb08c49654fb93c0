package client_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// hostile is a ToolService whose RPCs do what its function fields say: a
// server that breaks the contract, served over a real socket.
type hostile struct {
	toolwirev1.UnimplementedToolServiceServer
	list    func(*toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error)
	execute func(*toolwirev1.ExecuteBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error
	attach  func(*toolwirev1.AttachBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error
	call    func(*toolwirev1.CallToolRequest) (*toolwirev1.CallToolResponse, error)
}

func (h *hostile) CallTool(_ context.Context, req *toolwirev1.CallToolRequest) (*toolwirev1.CallToolResponse, error) {
	return h.call(req)
}

func (h *hostile) ListTools(_ context.Context, req *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	return h.list(req)
}

func (h *hostile) ExecuteBatch(req *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
	return h.execute(req, s)
}

func (h *hostile) AttachBatch(req *toolwirev1.AttachBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
	return h.attach(req, s)
}

// serveHostile serves h on a loopback port and returns a client for it.
func serveHostile(t *testing.T, h *hostile, opts ...client.Option) *client.Client {
	t.Helper()
	addr := serveGRPC(t, func(gs *grpc.Server) { toolwirev1.RegisterToolServiceServer(gs, h) })
	c, err := client.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// seqd returns a copy of ev numbered seq.
func seqd(seq uint64, ev *toolwirev1.ExecuteBatchResponse) *toolwirev1.ExecuteBatchResponse {
	ev = proto.Clone(ev).(*toolwirev1.ExecuteBatchResponse)
	ev.Seq = seq
	return ev
}

// TestListToolsEndlessPages: a server whose pages never end, each going on
// from the last, is read up to the client's bounds on a listing (64 MiB,
// or the pages WithListLimits allows), then refused with an error naming
// the bound; one that names a page token twice is refused at once.
func TestListToolsEndlessPages(t *testing.T) {
	t.Parallel()
	desc := strings.Repeat("d", 1000)
	tests := []struct {
		name     string
		opts     []client.Option
		tools    int  // per page, each with a 1,000-byte description
		token    bool // the same token on every page
		maxPages int64
		want     string
	}{
		{"pages of 1 MB", nil, 1000, false, 66, "more than 64 MiB"},
		{"small pages", []client.Option{client.WithListLimits(0, 100)}, 1, false, 100, "read 100 pages"},
		{"a token twice", nil, 1, true, 2, "page token it named before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var pages atomic.Int64
			c := serveHostile(t, &hostile{list: func(*toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
				n := pages.Add(1)
				resp := &toolwirev1.ListToolsResponse{Revision: "r", NextPageToken: fmt.Sprint("p", n)}
				if tt.token {
					resp.NextPageToken = "more"
				}
				for i := range tt.tools {
					resp.Tools = append(resp.Tools, &toolwirev1.Tool{Name: fmt.Sprintf("t%09d-%04d", n, i), Description: desc})
				}
				return resp, nil
			}}, tt.opts...)
			// Bounded by the test's deadline, not a fixed 20 s: 66 pages of
			// 1 MB under -race on a loaded machine took longer.
			ctx, cancel := context.WithDeadline(context.Background(), testenv.Deadline(t))
			defer cancel()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := c.ListTools(ctx)
			runtime.ReadMemStats(&after)
			t.Logf("%d pages, %d MiB allocated: %v", pages.Load(), (after.TotalAlloc-before.TotalAlloc)>>20, err)
			if err == nil || !strings.Contains(err.Error(), tt.want) || pages.Load() > tt.maxPages {
				t.Errorf("%v after %d pages; want an error saying %q after at most %d", err, pages.Load(), tt.want, tt.maxPages)
			}
		})
	}
}

// collectEvents reads seq to its end, returning its events and the error
// that ended it.
func collectEvents(seq func(func(*toolwirev1.ExecuteBatchResponse, error) bool)) ([]*toolwirev1.ExecuteBatchResponse, error) {
	var evs []*toolwirev1.ExecuteBatchResponse
	for ev, err := range seq {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// TestReattachToAHostileServer: after a dropped stream, a server that
// resends events seen before is not followed into yielding them twice, and
// one that skips an event or sends them out of order is an error, not an
// event lost without a word.
func TestReattachToAHostileServer(t *testing.T) {
	t.Parallel()
	acc := accepted([]string{"a", "b", "c"})
	first := []*toolwirev1.ExecuteBatchResponse{seqd(1, acc), seqd(2, result("a", 0, "A"))}
	tests := []struct {
		name    string
		resumed []*toolwirev1.ExecuteBatchResponse // AttachBatch's answer
		want    []uint64                           // seqs yielded
		wantErr string
	}{
		{"events again", []*toolwirev1.ExecuteBatchResponse{seqd(1, acc), seqd(2, result("a", 0, "A")), seqd(3, result("b", 1, "B")), seqd(2, result("a", 0, "A")), seqd(4, result("c", 2, "C")), seqd(5, finished)}, []uint64{1, 2, 3, 4, 5}, ""},
		{"out of order", []*toolwirev1.ExecuteBatchResponse{seqd(4, result("c", 2, "C")), seqd(3, result("b", 1, "B")), seqd(5, finished)}, []uint64{1, 2}, "seq 4"},
		{"an event skipped", []*toolwirev1.ExecuteBatchResponse{seqd(3, result("b", 1, "B")), seqd(5, finished)}, []uint64{1, 2, 3}, "seq 5"},
		{"unnumbered", []*toolwirev1.ExecuteBatchResponse{seqd(0, result("b", 1, "B")), seqd(3, result("b", 1, "B"))}, []uint64{1, 2}, "seq 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var attaches atomic.Int32
			c := serveHostile(t, &hostile{
				execute: func(_ *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
					for _, ev := range first {
						if err := s.Send(ev); err != nil {
							return err
						}
					}
					return status.Error(codes.Unavailable, "cut")
				},
				attach: func(req *toolwirev1.AttachBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
					if attaches.Add(1) > 1 {
						return status.Error(codes.Unavailable, "gone")
					}
					for _, ev := range tt.resumed {
						if err := s.Send(ev); err != nil {
							return err
						}
					}
					return status.Error(codes.Unavailable, "cut again")
				},
			}, client.WithReattach(3, time.Millisecond))
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil), client.Call("b", "x", nil), client.Call("c", "x", nil)}, Options: &toolwirev1.BatchOptions{Detach: true}}
			evs, err := collectEvents(c.ExecuteBatch(testContext(t), req))
			var got []uint64
			for _, ev := range evs {
				got = append(got, ev.GetSeq())
			}
			if !slices.Equal(got, tt.want) || (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("yielded seqs %v, then %v; want %v, then an error saying %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestStreamEndsAtBatchFinished: BatchFinished is a batch's last event, so
// a server that holds the stream open after it (for ever here) does not
// hold the client's loop, or Collect, with it.
func TestStreamEndsAtBatchFinished(t *testing.T) {
	t.Parallel()
	held := make(chan struct{}, 1)
	c := serveHostile(t, &hostile{execute: func(_ *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
		for _, ev := range []*toolwirev1.ExecuteBatchResponse{seqd(1, accepted([]string{"a"})), seqd(2, result("a", 0, "A")), seqd(3, finished)} {
			if err := s.Send(ev); err != nil {
				return err
			}
		}
		<-s.Context().Done() // until the client lets go
		held <- struct{}{}
		return nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil)}}
	b, err := client.CollectFor(req, c.ExecuteBatch(ctx, req))
	if err != nil || client.Text(b.Results[0]) != "A" {
		t.Fatalf("Collect of a stream held open after BatchFinished: %v", err)
	}
	<-held // the RPC was cancelled when the loop ended
}

// TestReattachGivesUp: a server that answers every AttachBatch with
// UNAVAILABLE is asked attempts times, backing off, then the error is
// yielded.
func TestReattachGivesUp(t *testing.T) {
	t.Parallel()
	var attaches atomic.Int32
	c := serveHostile(t, &hostile{
		execute: func(_ *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			if err := s.Send(seqd(1, accepted([]string{"a"}))); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "cut")
		},
		attach: func(*toolwirev1.AttachBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			attaches.Add(1)
			return status.Error(codes.Unavailable, "still cut")
		},
	}, client.WithReattach(4, time.Millisecond))
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil)}, Options: &toolwirev1.BatchOptions{Detach: true}}
	evs, err := collectEvents(c.ExecuteBatch(testContext(t), req))
	if len(evs) != 1 || status.Code(err) != codes.Unavailable || attaches.Load() != 4 {
		t.Errorf("%d events, %v, after %d AttachBatch; want 1, UNAVAILABLE, 4", len(evs), err, attaches.Load())
	}
}

// TestLargeEventRefused: a 100 MB event is refused by the client's receive
// limit, RESOURCE_EXHAUSTED, rather than read.
func TestLargeEventRefused(t *testing.T) {
	t.Parallel()
	c := serveHostile(t, &hostile{execute: func(_ *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
		if err := s.Send(seqd(1, accepted([]string{"a"}))); err != nil {
			return err
		}
		return s.Send(seqd(2, result("a", 0, strings.Repeat("x", 100<<20))))
	}})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil)}}
	evs, err := collectEvents(c.ExecuteBatch(testContext(t), req))
	runtime.ReadMemStats(&after)
	t.Logf("%d events, %v; %d MiB allocated in all (the server's included)", len(evs), err, (after.TotalAlloc-before.TotalAlloc)>>20)
	if len(evs) != 1 || status.Code(err) != codes.ResourceExhausted {
		t.Errorf("%d events, then %v; want 1, then RESOURCE_EXHAUSTED", len(evs), err)
	}
}

// TestRetryDelayOfDays: a refusal whose RetryInfo says to wait 30 days is
// returned at once, its delay readable, rather than waited out (until the
// caller's deadline, or for ever without one).
func TestRetryDelayOfDays(t *testing.T) {
	t.Parallel()
	const days = 30 * 24 * time.Hour
	st, err := status.New(codes.ResourceExhausted, "come back next month").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(days)})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	c := serveHostile(t, &hostile{
		call: func(*toolwirev1.CallToolRequest) (*toolwirev1.CallToolResponse, error) {
			calls.Add(1)
			return nil, st.Err()
		},
		execute: func(*toolwirev1.ExecuteBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			calls.Add(1)
			return st.Err()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.CallTool(ctx, &toolwirev1.CallToolRequest{Call: client.Call("a", "x", nil)})
	_, berr := collectEvents(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil)}}))
	for _, err := range []error{err, berr} {
		if d, _ := client.RetryDelay(err); status.Code(err) != codes.ResourceExhausted || d != days {
			t.Errorf("%v (delay %v); want RESOURCE_EXHAUSTED with the server's delay", err, d)
		}
	}
	if ctx.Err() != nil || calls.Load() != 2 {
		t.Errorf("after %d calls the context has %v: the client waited for the server's %v", calls.Load(), ctx.Err(), days)
	}
}

// TestCallToolAnswersItsCall: CallTool's result must be the call's: a
// response without one, or with another call's, is an error, not an empty
// success or an answer the runtime would hand the model for another call.
func TestCallToolAnswersItsCall(t *testing.T) {
	t.Parallel()
	for name, resp := range map[string]*toolwirev1.CallToolResponse{
		"no result":           {},
		"another call's":      {Result: &toolwirev1.CallResult{CallId: "other", Content: []*toolwirev1.Content{textBlock("hi")}}},
		"the call's, nothing": {Result: &toolwirev1.CallResult{CallId: "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := serveHostile(t, &hostile{call: func(*toolwirev1.CallToolRequest) (*toolwirev1.CallToolResponse, error) { return resp, nil }})
			r, err := c.CallTool(testContext(t), &toolwirev1.CallToolRequest{Call: client.Call("a", "x", nil)})
			if resp.GetResult().GetCallId() == "a" {
				if err != nil || r.GetCallId() != "a" {
					t.Errorf("the call's own result: %v, %v", r, err)
				}
				return
			}
			if status.Code(err) != codes.Internal || r != nil {
				t.Errorf("%v, %v; want INTERNAL and no result", r, err)
			}
		})
	}
}

// TestReattachAfterAQuietEnd: a detached batch's stream that a server ends
// as if done, before BatchFinished, is re-attached from the last seq (the
// rest of the batch is not dropped without a word); a re-attach that
// brings nothing ends the sequence.
func TestReattachAfterAQuietEnd(t *testing.T) {
	t.Parallel()
	var attaches atomic.Int32
	c := serveHostile(t, &hostile{
		execute: func(_ *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			for _, ev := range []*toolwirev1.ExecuteBatchResponse{seqd(1, accepted([]string{"a"})), seqd(2, result("a", 0, "A"))} {
				if err := s.Send(ev); err != nil {
					return err
				}
			}
			return nil // ended as if done
		},
		attach: func(req *toolwirev1.AttachBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			if attaches.Add(1) == 1 && req.GetAfterSeq() == 2 {
				return s.Send(seqd(3, finished))
			}
			return nil
		},
	}, client.WithReattach(3, time.Millisecond))
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil)}, Options: &toolwirev1.BatchOptions{Detach: true}}
	_, err := client.CollectFor(req, c.ExecuteBatch(testContext(t), req))
	if err != nil || attaches.Load() != 1 {
		t.Errorf("%v after %d AttachBatch; want the batch whole after 1", err, attaches.Load())
	}
	// Attach from the last seq of a finished batch: nothing follows.
	evs, err := collectEvents(c.Attach(testContext(t), "b", 3))
	if len(evs) != 0 || err != nil || attaches.Load() != 2 {
		t.Errorf("Attach after the last event: %d events, %v, %d AttachBatch; want none, no error, 2", len(evs), err, attaches.Load())
	}
}

// TestMissingResultsNamedBriefly: a plan of 100,000 calls none of which
// gets a result makes an error naming 20 of them and counting the rest,
// not a message of megabytes.
func TestMissingResultsNamedBriefly(t *testing.T) {
	t.Parallel()
	ids := make([]string, 100_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("call-%06d", i)
	}
	c := serveHostile(t, &hostile{execute: func(_ *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
		return s.Send(seqd(1, accepted(ids)))
	}})
	_, err := client.Collect(c.ExecuteBatch(testContext(t), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil)}}))
	if err == nil || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "and 99980 more") {
		t.Errorf("an error of %d bytes: %.200s", len(fmt.Sprint(err)), err)
	}
}

// TestDetachOnAServerFromBeforeDurableBatches: in a rolling upgrade from a
// version before durable batches, a detached batch can reach a replica
// that numbers no events and knows no detach (it runs the batch as a plain
// one, tied to the stream). Its events are yielded as a plain batch's, and
// a cut stream is the error, with no AttachBatch the server lacks; the
// client used to end at the first event ("seq 0 after seq 0: the batch's
// events are not in order"), which closed the stream and so cancelled the
// batch there: measured against a real 9f9f6d5 replica, no result came.
func TestDetachOnAServerFromBeforeDurableBatches(t *testing.T) {
	t.Parallel()
	events := []*toolwirev1.ExecuteBatchResponse{accepted([]string{"a"}), result("a", 0, "A"), finished}
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut=%v", cut), func(t *testing.T) {
			t.Parallel()
			var attaches atomic.Int32
			c := serveHostile(t, &hostile{
				execute: func(_ *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
					for i, ev := range events {
						if cut && i == 1 {
							return status.Error(codes.Unavailable, "cut")
						}
						if err := s.Send(ev); err != nil {
							return err
						}
					}
					return nil
				},
				attach: func(*toolwirev1.AttachBatchRequest, grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
					attaches.Add(1)
					return status.Error(codes.Unimplemented, "unknown method AttachBatch")
				},
			}, client.WithReattach(3, time.Millisecond))
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("a", "x", nil)}, Options: &toolwirev1.BatchOptions{Detach: true}}
			evs, err := collectEvents(c.ExecuteBatch(testContext(t), req))
			want, wantCode := 3, codes.OK
			if cut {
				want, wantCode = 1, codes.Unavailable
			}
			if len(evs) != want || status.Code(err) != wantCode || attaches.Load() != 0 {
				t.Errorf("%d events, then %v, after %d attaches; want %d events, then %v, and no attach", len(evs), err, attaches.Load(), want, wantCode)
			}
		})
	}
}

// TestCallToolOnAServerWithoutIt: in a rolling upgrade from a version
// before CallTool, a balancer can send the unary call to an old replica,
// which answers UNIMPLEMENTED; the call goes again as a batch of one, with
// its session, where CallTool returned the error (measured: `toolwire
// call --no-progress` against a real 9f9f6d5 replica, "unknown method
// CallTool").
func TestCallToolOnAServerWithoutIt(t *testing.T) {
	t.Parallel()
	var calls, batches atomic.Int32
	var got *toolwirev1.ExecuteBatchRequest
	c := serveHostile(t, &hostile{
		call: func(*toolwirev1.CallToolRequest) (*toolwirev1.CallToolResponse, error) {
			calls.Add(1)
			return nil, status.Error(codes.Unimplemented, "unknown method CallTool for service toolwire.v1.ToolService")
		},
		execute: func(req *toolwirev1.ExecuteBatchRequest, s grpc.ServerStreamingServer[toolwirev1.ExecuteBatchResponse]) error {
			batches.Add(1)
			got = req
			for _, ev := range []*toolwirev1.ExecuteBatchResponse{accepted([]string{"c1"}), result("c1", 0, "done"), finished} {
				if err := s.Send(ev); err != nil {
					return err
				}
			}
			return nil
		},
	})
	r, err := c.CallTool(testContext(t), &toolwirev1.CallToolRequest{Call: client.Call("c1", "x", nil), SessionId: "s1"})
	if err != nil || client.Text(r) != "done" || calls.Load() != 1 || batches.Load() != 1 {
		t.Fatalf("CallTool: %v, %v after %d CallTool and %d ExecuteBatch; want the batch's result", r, err, calls.Load(), batches.Load())
	}
	if len(got.GetCalls()) != 1 || got.GetCalls()[0].GetCallId() != "c1" || got.GetSessionId() != "s1" {
		t.Errorf("the batch sent: %v; want call c1 of session s1", got)
	}
}
