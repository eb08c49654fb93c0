package grpcserve

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// slowClient returns a client whose connection's flow-control windows stay
// at HTTP/2's 64 KiB (fixed windows turn off grpc-go's dynamic growth), so
// a stream it does not read stops the server's Send soon and reliably.
func (s *servedServer) slowClient(tb testing.TB) toolwirev1.ToolServiceClient {
	return s.client(tb, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
}

// bigEchoes returns a batch of n echo calls, each returning about size
// bytes twice (as text and as structured content), keyed when keyed.
func bigEchoes(prefix string, n, size int, keyed bool) *toolwirev1.ExecuteBatchRequest {
	text := strings.Repeat("x", size)
	req := &toolwirev1.ExecuteBatchRequest{}
	for i := range n {
		c := call(fmt.Sprintf("%s%d", prefix, i), "echo", fmt.Sprintf(`{"text":%q}`, text))
		if keyed {
			c.IdempotencyKey = c.CallId
		}
		req.Calls = append(req.Calls, c)
	}
	return req
}

// stalled starts req on c and reads only its first event, as a client that
// stops reading does.
func stalled(tb testing.TB, c toolwirev1.ToolServiceClient, req *toolwirev1.ExecuteBatchRequest) grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse] {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	stream, err := c.ExecuteBatch(ctx, req)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		tb.Fatal(err)
	}
	return stream
}

// waitingToReport counts the running batches with calls waiting for room in
// their outbox: batches stopped by a slow reader.
func (s *Server) waitingToReport() int { return s.engine.Stats().WaitingToReport }

func (s *Server) running() int { return s.engine.Stats().Batches }

func TestSlowReaderStopsItsBatchStartingCalls(t *testing.T) {
	t.Parallel()
	// Once the outbox is full, no call starts: its result could only wait.
	// The budget holds about 7 results of 64 KiB, the transport 2, and 8
	// run at once; before, every call whose result entered the outbox was
	// followed by a new one, so 8 more waited (about 18 in all).
	var ran atomic.Int32
	blob := tools.Tool{Name: "blob", Description: "returns 64 KiB", Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			ran.Add(1)
			return tools.Text(strings.Repeat("x", 64<<10)), nil
		}}
	s := newServedServer(t, engine.Config{MaxStreamBufferBytes: 512 << 10, MaxParallel: 8}, blob)
	req := &toolwirev1.ExecuteBatchRequest{}
	for i := range 200 {
		req.Calls = append(req.Calls, call(fmt.Sprint(i), "blob", ""))
	}
	stalled(t, s.slowClient(t), req)
	waitFor(t, func() bool { // until the count holds still
		before := ran.Load()
		time.Sleep(100 * time.Millisecond)
		return before > 0 && ran.Load() == before
	})
	if n := ran.Load(); n > 14 {
		t.Errorf("%d calls ran for a client that reads nothing, want at most 14 (budget, transport, one wave)", n)
	}
}

// TestSendTimeoutEndsAStreamNobodyReads: the send watchdog ends every
// stream whose client reads nothing for SendTimeout, with
// DEADLINE_EXCEEDED, and cancels its calls, "held" too.
func TestSendTimeoutEndsAStreamNobodyReads(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{SendTimeout: 300 * time.Millisecond, MaxStreamBufferBytes: 128 << 10})
	var reqs []*toolwirev1.ExecuteBatchRequest
	var streams []grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse]
	start := time.Now()
	for i := range 2 {
		req := bigEchoes(fmt.Sprintf("k%d-", i), 16, 100<<10, true)
		req.Calls = append(req.Calls, call("held", "hold", "")) // ends only when cancelled
		reqs = append(reqs, req)
		streams = append(streams, stalled(t, s.slowClient(t), req))
	}
	waitFor(t, func() bool { return s.srv.running() == 0 }) // every call, "held" too, was ended
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("streams ended after %s, before the send timeout", d)
	}
	for i, stream := range streams {
		if _, err := drain(stream); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("stalled stream %d ended with %v, want DEADLINE_EXCEEDED", i, err)
		}
	}
	// Keyed calls that ran before the end are recorded: a retry replays them.
	events := (&testServer{client: s.client(t)}).run(t, &toolwirev1.ExecuteBatchRequest{Calls: reqs[0].Calls[:1]})
	if r := results(t, events)["k0-0"]; !r.GetReplayed() || r.GetIsError() {
		t.Errorf("retried keyed call: replayed %v error %v; want its recorded result replayed", r.GetReplayed(), r.GetIsError())
	}
}

// TestSlowStreamsDoNotHurtOtherCallers: callers that read are served, none
// refused, beside ten streams whose clients read nothing and which stay
// stalled the whole time; once those clients go, their calls, "held" too,
// are ended and nothing is left behind. The send timeout is long: only the
// test ends the slow streams (TestSendTimeoutEndsAStreamNobodyReads has the
// watchdog end them), so no clock runs while the slow streams are set up
// on a loaded machine. MaxQueueWait is only reached if the slow streams
// held what the normal callers need.
func TestSlowStreamsDoNotHurtOtherCallers(t *testing.T) {
	// Not parallel: it counts goroutines.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // runs last, after the server's cleanup
	s := newServedServer(t, engine.Config{
		SendTimeout:          time.Hour,
		MaxStreamBufferBytes: 256 << 10,
		MaxConcurrentCalls:   16,
		MaxQueueWait:         30 * time.Second,
	})
	slow := s.slowClient(t)
	var streams []grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse]
	var leave []context.CancelFunc
	for i := range 10 {
		req := bigEchoes(fmt.Sprintf("s%d-", i), 32, 32<<10, false)
		req.Calls = append(req.Calls, call("held", "hold", ""))
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		stream, err := slow.ExecuteBatch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		streams, leave = append(streams, stream), append(leave, cancel)
	}
	waitFor(t, func() bool { return s.srv.waitingToReport() == 10 })

	normal := &testServer{client: s.client(t)}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for c := range 8 {
		wg.Go(func() {
			for j := 0; j < 5; j++ {
				req := bigEchoes(fmt.Sprintf("n%d-%d-", c, j), 4, 1000, false)
				events, err := normal.runErr(as(fmt.Sprint("normal", c)), req)
				if err != nil {
					errs <- err
					return
				}
				got := results(t, events)
				for _, call := range req.Calls {
					if r := got[call.CallId]; r == nil || r.GetIsError() {
						errs <- fmt.Errorf("call %s: %v", call.CallId, r)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("normal caller beside slow streams: %v", err)
	}
	if n := s.srv.waitingToReport(); n != 10 {
		t.Errorf("%d slow streams still stalled after the normal callers; want all 10 (the test proves nothing otherwise)", n)
	}

	for _, cancel := range leave {
		cancel()
	}
	waitFor(t, func() bool { return s.srv.running() == 0 }) // their "held" calls were cancelled
	for i, stream := range streams {
		if _, err := drain(stream); status.Code(err) != codes.Canceled {
			t.Errorf("slow stream %d ended with %v, want CANCELED (its client left)", i, err)
		}
	}
}

// slowBenchConfig is BenchmarkSlowStreams' server configuration: the slow
// streams must outlive the measurement, so the send timeout is long.
func slowBenchConfig(ec engine.Config) engine.Config {
	ec.SendTimeout = time.Hour
	return ec
}

func TestBufferBudgetEndsStalledStreamsNotReaders(t *testing.T) {
	t.Parallel()
	// Six clients that read nothing could hold about 320 KiB each (a
	// 256 KiB buffer and a waiting result); the server holds 1 MiB for
	// all of them.
	s := newServedServer(t, engine.Config{
		MaxStreamBufferBytes: 256 << 10,
		MaxBufferedBytes:     1 << 20,
		MaxParallel:          1,
		SendTimeout:          time.Hour, // only the budget ends streams here
	})
	slow := s.slowClient(t)
	var streams []grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse]
	for i := range 6 {
		streams = append(streams, stalled(t, slow, bigEchoes(fmt.Sprintf("s%d-", i), 64, 32<<10, false)))
	}

	// Callers that read are served meanwhile, none refused. Their
	// batches fit in the transport's window (4 KiB of 64), so no Send of
	// theirs waits for them, however starved of CPU their reading is: with
	// 128 KiB batches, a reader that fell 50 ms behind on a loaded machine
	// was a stalled stream holding the most, and was ended (CI, load 10+).
	normal := &testServer{client: s.client(t)}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for j := range 5 {
				req := bigEchoes(fmt.Sprintf("n%d-%d-", c, j), 4, 1<<10, false)
				events, err := normal.runErr(as(fmt.Sprint("normal", c)), req)
				if err != nil {
					t.Errorf("a caller that reads, beside the stalled streams: %v", err)
					return
				}
				if got := results(t, events); len(got) != 4 {
					t.Errorf("%d results for 4 calls", len(got))
				}
			}
		})
	}
	wg.Wait()

	// The stalled streams holding the most were ended until the rest fit.
	eng := s.srv.engine
	waitFor(t, func() bool { st := eng.Stats(); return st.EndedOverBudget >= 2 && st.BufferedBytes <= 1<<20 })
	ended := 0
	for i, stream := range streams {
		_, err := drain(stream) // reading, a stream left alone finishes
		switch status.Code(err) {
		case codes.DeadlineExceeded: // the server ended it: the client did not read in time
			ended++
		case codes.OK:
		default:
			t.Errorf("stalled stream %d ended with %v; want DEADLINE_EXCEEDED or all its events", i, err)
		}
	}
	if st := eng.Stats(); int64(ended) != st.EndedOverBudget {
		t.Errorf("%d streams ended with DEADLINE_EXCEEDED; the engine ended %d", ended, st.EndedOverBudget)
	}
}

func TestConnectionLeavingEndedStreamsUnreadIsClosed(t *testing.T) {
	t.Parallel()
	// Streams ended for not reading keep what gRPC's transport accepted of
	// them until their client reads or goes; past a number of them, the
	// connection holding the most is closed.
	s := newServedServer(t, engine.Config{
		MaxStreamBufferBytes: 128 << 10,
		MaxBufferedBytes:     256 << 10,
		MaxParallel:          1,
		SendTimeout:          time.Hour,
	})
	s.srv.conns.mu.Lock()
	s.srv.conns.max = 2
	s.srv.conns.mu.Unlock()
	slow := s.slowClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []grpc.ServerStreamingClient[toolwirev1.ExecuteBatchResponse]
	for i := 0; i < 6 && s.srv.conns.closed.Load() == 0; i++ {
		// Read the first event, then nothing; opening one may fail once
		// the connection is closed.
		stream, err := slow.ExecuteBatch(ctx, bigEchoes(fmt.Sprintf("s%d-", i), 64, 32<<10, false))
		if err == nil {
			_, err = stream.Recv()
		}
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("stream %d: %v", i, err)
			}
			break
		}
		streams = append(streams, stream)
	}
	eng := s.srv.engine
	waitFor(t, func() bool { return s.srv.conns.closed.Load() == 1 })
	// The client reconnects by itself; a stream it opened on the new
	// connection after the close is not the server's to end.
	cancel()
	waitFor(t, func() bool { return eng.Stats().Batches == 0 })
	if st := eng.Stats(); st.BufferedBytes != 0 || st.EndedOverBudget < 3 {
		t.Errorf("after the connection closed: %d bytes buffered, %d streams ended; want 0 and at least 3", st.BufferedBytes, st.EndedOverBudget)
	}
	for i, stream := range streams {
		switch _, err := drain(stream); status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		default:
			t.Errorf("stalled stream %d: %v; want its connection closed (UNAVAILABLE) or the stream ended (DEADLINE_EXCEEDED)", i, err)
		}
	}
	// Other connections are served as before.
	events := (&testServer{client: s.client(t)}).run(t, bigEchoes("n", 2, 10, false))
	if got := results(t, events); len(got) != 2 {
		t.Errorf("%d results for 2 calls on another connection", len(got))
	}
}

// TestSendTimeoutEndsAnAttachmentNobodyReads: an AttachBatch stream whose
// client reads nothing is ended by the send watchdog with
// DEADLINE_EXCEEDED, its Send stopped through the tap handle, and the
// batch runs on. It used to wait in Send for as long as the client kept
// its connection.
func TestSendTimeoutEndsAnAttachmentNobodyReads(t *testing.T) {
	t.Parallel()
	s := newServedServer(t, engine.Config{SendTimeout: 300 * time.Millisecond})
	req := bigEchoes("d", 16, 100<<10, false)
	req.Calls = append(req.Calls, call("held", "hold", "")) // ends only when cancelled
	req.Options = &toolwirev1.BatchOptions{Detach: true}
	ctx, cancel := context.WithCancel(context.Background())
	own, err := s.client(t).ExecuteBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := own.Recv()
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the batch runs on
	id := first.GetAccepted().GetBatchId()

	actx, acancel := context.WithCancel(context.Background())
	t.Cleanup(acancel)
	att, err := s.slowClient(t).AttachBatch(actx, &toolwirev1.AttachBatchRequest{BatchId: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := att.Recv(); err != nil {
		t.Fatal(err)
	}
	// Read nothing more until the server has ended the stream.
	waitFor(t, func() bool {
		s.srv.conns.mu.Lock()
		defer s.srv.conns.mu.Unlock()
		return s.srv.conns.ended > 0
	})
	if _, err := drain(att); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("stalled attachment ended with %v, want DEADLINE_EXCEEDED", err)
	}
	if n := s.srv.running(); n != 1 {
		t.Errorf("%d batches running once the attachment was ended, want 1 (the batch runs on)", n)
	}
	if _, err := s.client(t).CancelBatch(context.Background(), &toolwirev1.CancelBatchRequest{BatchId: id}); err != nil {
		t.Fatal(err)
	}
}
