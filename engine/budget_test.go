package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// stalledSink is a client that reads nothing after BatchAccepted: its
// later Sends block, as a gRPC stream's do under flow control, until
// StopSend ends them (with an error) or resume lets them through.
type stalledSink struct {
	stop, resume chan struct{}
	stopOnce     sync.Once
	cause        error // set before stop is closed
	sends        atomic.Int32
	blocked      atomic.Bool // a Send is waiting
}

func newStalledSink() *stalledSink {
	return &stalledSink{stop: make(chan struct{}), resume: make(chan struct{})}
}

func (s *stalledSink) Send(*toolwirev1.ExecuteBatchResponse) error {
	if s.sends.Add(1) == 1 {
		return nil // BatchAccepted
	}
	s.blocked.Store(true)
	defer s.blocked.Store(false)
	select {
	case <-s.stop:
		return errSinkGone
	case <-s.resume:
		return nil
	}
}

func (s *stalledSink) StopSend(cause error) bool {
	s.stopOnce.Do(func() { s.cause = cause; close(s.stop) })
	return true
}

// stoppedBy returns the cause StopSend was given, or nil.
func (s *stalledSink) stoppedBy() error {
	select {
	case <-s.stop:
		return s.cause
	default:
		return nil
	}
}

// budgetTools are read-only tools returning 100 KiB and 900 KiB, counting
// their calls by call ID prefix (before the first "-"), and a hold that
// returns when cancelled, keeping the cause.
type budgetTools struct {
	mu    sync.Mutex
	calls map[string]int
	held  chan error
}

func newBudgetTools(t *testing.T) (*budgetTools, *tools.Snapshot) {
	bt := &budgetTools{calls: map[string]int{}, held: make(chan error, 16)}
	blob := func(name string, n int) tools.Tool {
		return tools.Tool{Name: name, Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
				bt.mu.Lock()
				bt.calls[strings.SplitN(c.ID, "-", 2)[0]]++
				bt.mu.Unlock()
				return tools.Text(strings.Repeat("x", n)), nil
			}}
	}
	reg, err := tools.NewRegistry(blob("kib100", 100<<10), blob("kib900", 900<<10),
		tools.Tool{Name: "hold", Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
				<-ctx.Done()
				bt.held <- context.Cause(ctx)
				return nil, ctx.Err()
			}})
	if err != nil {
		t.Fatal(err)
	}
	return bt, reg.Snapshot()
}

func (bt *budgetTools) ran(prefix string) int {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	return bt.calls[prefix]
}

// budgetBatch is n calls of tool, with IDs prefix-0, prefix-1, ….
func budgetBatch(prefix, tool string, n int) *toolwirev1.ExecuteBatchRequest {
	req := &toolwirev1.ExecuteBatchRequest{}
	for i := range n {
		req.Calls = append(req.Calls, tc(fmt.Sprintf("%s-%d", prefix, i), tool))
	}
	return req
}

// runAsync runs req in the background; the channel receives Run's error.
func runAsync(e *Engine, snap *tools.Snapshot, req *toolwirev1.ExecuteBatchRequest, sink Sink) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background(), snap, req, sink) }()
	return done
}

func TestBufferBudgetEndsTheStalledStreamHoldingTheMost(t *testing.T) {
	t.Parallel()
	ends := &streamEnds{}
	e := newTestEngineWith(t, Config{
		MaxStreamBufferBytes: 1 << 20,
		MaxBufferedBytes:     5 << 19, // 2.5 MiB
		MaxResultBytes:       1 << 20,
	}, Deps{Observer: ends})
	bt, snap := newBudgetTools(t)

	// a reads nothing: one 900 KiB result fits in its stream's buffer, the
	// other waits to enter it; both are held, about 1.8 MiB. hold runs
	// until the batch is cancelled.
	sinkA := newStalledSink()
	reqA := calls(tc("a-0", "kib900"), tc("a-1", "kib900"), tc("a-hold", "hold"))
	doneA := runAsync(e, snap, reqA, sinkA)
	waitFor(t, func() bool { return e.Stats().BufferedBytes >= 1800<<10 && e.Stats().WaitingToReport == 1 })

	// b reads nothing either: its buffer fills with ten 100 KiB results and
	// an eleventh waits, about 1.1 MiB, and the two pass the budget.
	sinkB := newStalledSink()
	doneB := runAsync(e, snap, &toolwirev1.ExecuteBatchRequest{Calls: budgetBatch("b", "kib100", 40).Calls, Options: &toolwirev1.BatchOptions{Sequential: true}}, sinkB)

	// The stream holding the most, a's, is ended; its calls are cancelled.
	var errA error
	select {
	case errA = <-doneA:
	case <-doneB:
		t.Fatal("b's stream ended first; a held more")
	}
	if CodeOf(errA) != ResourceExhausted {
		t.Errorf("a's Run: %v; want ResourceExhausted", errA)
	}
	if cause := sinkA.stoppedBy(); !errors.Is(cause, ErrOverBudget) {
		t.Errorf("a's sink was stopped with %v; want ErrOverBudget", cause)
	}
	if cause := <-bt.held; !errors.Is(cause, ErrOverBudget) {
		t.Errorf("a's running call was cancelled with %v; want ErrOverBudget", cause)
	}
	// What the others hold fits in the budget, and b goes on waiting.
	waitFor(t, func() bool { return e.Stats().BufferedBytes <= 5<<19 && bt.ran("b") == 11 })
	if st := e.Stats(); st.EndedOverBudget != 1 || sinkB.stoppedBy() != nil {
		t.Errorf("ended %d streams (b stopped: %v); want a's only", st.EndedOverBudget, sinkB.stoppedBy())
	}

	// A caller that reads is not refused beside b, nor its results cut.
	var normal recorder
	if err := e.Run(context.Background(), snap, budgetBatch("n", "kib100", 4), &normal); err != nil {
		t.Fatalf("a caller that reads, beside b: %v", err)
	}
	if got := normal.results(); len(got) != 4 {
		t.Errorf("%d results for 4 calls", len(got))
	}
	for id, r := range normal.results() {
		if r.GetIsError() || len(r.GetContent()[0].GetText().GetText()) != 100<<10 {
			t.Errorf("%s: error %v, %d bytes", id, r.GetIsError(), len(r.GetContent()[0].GetText().GetText()))
		}
	}

	// b, left alone, finishes once its client reads.
	close(sinkB.resume)
	if err := <-doneB; err != nil {
		t.Errorf("b's Run once its client read: %v", err)
	}
	if st := e.Stats(); st.BufferedBytes != 0 {
		t.Errorf("%d bytes still counted with no batch running; want 0", st.BufferedBytes)
	}

	// The observer is told of a's end, by the setting that ended it.
	if got := ends.reasons(); len(got) != 1 || got[0] != "max_buffered_bytes" {
		t.Errorf("streams ended, by reason: %q; want one, max_buffered_bytes", got)
	}
}

func TestBufferBudgetBoundsWhatStalledStreamsHold(t *testing.T) {
	t.Parallel()
	const budget = 4 << 20
	e := newTestEngine(t, Config{MaxStreamBufferBytes: 1 << 20, MaxBufferedBytes: budget})
	bt, snap := newBudgetTools(t)
	type stream struct {
		sink *stalledSink
		done <-chan error
	}
	var streams []stream
	// Twelve clients that read nothing, each able to hold about 1.1 MiB,
	// one after another: without the budget they would hold 13 MiB.
	for i := range 12 {
		prefix := fmt.Sprint("s", i)
		sink := newStalledSink()
		req := budgetBatch(prefix, "kib100", 40)
		req.Options = &toolwirev1.BatchOptions{Sequential: true}
		streams = append(streams, stream{sink, runAsync(e, snap, req, sink)})
		// Until it is full, unless the budget ended it first: the stream
		// holding the most may be the one filling.
		waitFor(t, func() bool { return bt.ran(prefix) == 11 && sink.blocked.Load() || sink.stoppedBy() != nil })
		waitFor(t, func() bool { return e.Stats().BufferedBytes <= budget })
	}
	// What they hold stayed within the budget, but for the stream being
	// filled when it passed it.
	st := e.Stats()
	if limit := int64(budget + 1<<20 + 100<<10 + 1<<10); st.BufferedPeak > limit {
		t.Errorf("stalled streams held up to %d bytes; want at most %d (the budget and one stream's buffer and waiting result)", st.BufferedPeak, limit)
	}
	if st.EndedOverBudget < 12-budget/(1<<20) {
		t.Errorf("%d streams ended; want at least %d", st.EndedOverBudget, 12-budget/(1<<20))
	}
	ended := 0
	for i, s := range streams {
		if s.sink.stoppedBy() == nil {
			s.sink.StopSend(errors.New("test over"))
			<-s.done
			continue
		}
		ended++
		if err := <-s.done; CodeOf(err) != ResourceExhausted {
			t.Errorf("stream %d was ended, and its Run returned %v; want ResourceExhausted", i, err)
		}
	}
	if int64(ended) != st.EndedOverBudget {
		t.Errorf("%d sinks were stopped for the budget; Stats counts %d", ended, st.EndedOverBudget)
	}
	if st := e.Stats(); st.BufferedBytes != 0 {
		t.Errorf("%d bytes still counted with no batch running; want 0", st.BufferedBytes)
	}
}

func TestConfigValidateBufferBudget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"no bound", Config{MaxBufferedBytes: -1}, true},
		{"as large as one stream's buffer", Config{MaxBufferedBytes: 1 << 20}, true},
		{"smaller than the default stream buffer", Config{MaxBufferedBytes: 1 << 19}, false},
		{"smaller than the stream buffer set", Config{MaxBufferedBytes: 4 << 20, MaxStreamBufferBytes: 8 << 20}, false},
	} {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v; want ok %v", tt.name, err, tt.ok)
		}
	}
}

// streamEnds is an Observer that records the reasons of StreamEnded.
type streamEnds struct {
	nopObserver
	mu   sync.Mutex
	seen []string
}

func (s *streamEnds) StreamEnded(_ context.Context, _ *BatchInfo, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, reason)
}

func (s *streamEnds) reasons() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// nopObserver is an Observer that does nothing, for tests to embed.
type nopObserver struct{}

func (nopObserver) BatchStarted(ctx context.Context, _ *BatchInfo) context.Context { return ctx }
func (nopObserver) LaneStarted(context.Context, *BatchInfo, int)                   {}
func (nopObserver) StreamEnded(context.Context, *BatchInfo, string)                {}
func (nopObserver) BatchEnded(context.Context, *BatchInfo, BatchCounts, error)     {}
func (nopObserver) CallStarted(ctx context.Context, _ *CallInfo) context.Context   { return ctx }
func (nopObserver) CallRunning(context.Context, *CallInfo)                         {}
func (nopObserver) CallAbandoned(context.Context, *CallInfo)                       {}
func (nopObserver) CallEnded(context.Context, *CallInfo, *toolwirev1.CallResult)   {}

// weightedSink is a stalled sink that holds each event three times over.
type weightedSink struct{ *stalledSink }

func (weightedSink) Weight() int { return 3 }

// TestWeightedSinkCountsWhatItHolds: a sink that holds an event several
// times over (the MCP surface's) is charged that many times its size, so
// the budget ends its stream where a sink of weight 1 would go on.
func TestWeightedSinkCountsWhatItHolds(t *testing.T) {
	t.Parallel()
	e := newTestEngineWith(t, Config{
		MaxStreamBufferBytes: 4 << 20,
		MaxBufferedBytes:     2 << 20,
		MaxResultBytes:       1 << 20,
	}, Deps{})
	_, snap := newBudgetTools(t)

	// Weight 1: one 900 KiB result held, under the 2 MiB budget.
	plain := newStalledSink()
	donePlain := runAsync(e, snap, calls(tc("p-0", "kib900")), plain)
	waitFor(t, func() bool { return e.Stats().BufferedBytes >= 900<<10 && plain.blocked.Load() })
	if held := e.Stats().BufferedBytes; held >= 1800<<10 {
		t.Errorf("a sink of weight 1 holding 900 KiB is counted as %d bytes", held)
	}
	close(plain.resume)
	if err := <-donePlain; err != nil {
		t.Fatalf("weight 1: %v", err)
	}

	// Weight 3: the same result counts 2.7 MiB, over the budget: the
	// stream is ended.
	heavy := weightedSink{newStalledSink()}
	err := <-runAsync(e, snap, calls(tc("h-0", "kib900")), heavy)
	if CodeOf(err) != ResourceExhausted || !errors.Is(heavy.stoppedBy(), ErrOverBudget) {
		t.Errorf("weight 3: Run %v, stopped by %v; want ResourceExhausted, ErrOverBudget", err, heavy.stoppedBy())
	}
	if st := e.Stats(); st.BufferedBytes != 0 {
		t.Errorf("%d bytes still counted with no batch running; want 0", st.BufferedBytes)
	}
}
