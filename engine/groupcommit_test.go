package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"google.golang.org/protobuf/proto"
)

// The tests of a detached batch's group commit: its writer appends what
// its calls queued meanwhile in one write, a reader gets nothing the store
// has not taken, and the numbering stays dense under any timing.

// logWrite is one write a recordingLog passed on: its kind and the seqs
// of the events it carried.
type logWrite struct {
	op   string // open, append, finish
	seqs []uint64
	err  error
}

// recordingLog is an EventLog that records the writes passed to it, and
// can hold one of them (holdWrite, by its number among Appends and
// Finishes, from 1) until released, or fail it.
type recordingLog struct {
	store.EventLog
	mu      sync.Mutex
	writes  []logWrite
	appends int // Appends and Finishes

	holdWrite int           // the Append or Finish to hold; 0: none
	held      []uint64      // the seqs it carries, once reached
	entered   chan struct{} // closed when the held Append is reached
	release   chan struct{} // closed to let it go on

	// fail says what the n-th Append or Finish (from 1) returns: an error
	// before writing, an error after writing (an answer lost), or nil.
	fail func(op string, n int) (before, after error)
	ops  map[string]int
}

func newRecordingLog(inner store.EventLog) *recordingLog {
	return &recordingLog{EventLog: inner, entered: make(chan struct{}), release: make(chan struct{}), ops: map[string]int{}}
}

// seqsOf returns the seqs of the events data carries (0 for one that does
// not decode).
func seqsOf(data [][]byte) []uint64 {
	var seqs []uint64
	for _, d := range data {
		ev := &toolwirev1.ExecuteBatchResponse{}
		_ = proto.Unmarshal(d, ev)
		seqs = append(seqs, ev.GetSeq())
	}
	return seqs
}

func (r *recordingLog) write(op string, data [][]byte, do func() error) error {
	r.mu.Lock()
	r.ops[op]++
	n := r.ops[op]
	if op != "open" {
		r.appends++
	}
	hold := op != "open" && r.appends == r.holdWrite
	r.mu.Unlock()
	var before, after error
	if r.fail != nil {
		before, after = r.fail(op, n)
	}
	if hold {
		r.held = seqsOf(data)
		close(r.entered)
		<-r.release
	}
	err := before
	if err == nil {
		if err = do(); err == nil {
			err = after
		}
	}
	r.mu.Lock()
	r.writes = append(r.writes, logWrite{op: op, seqs: seqsOf(data), err: err})
	r.mu.Unlock()
	return err
}

func (r *recordingLog) Open(ctx context.Context, name, owner string, lease, ttl time.Duration, data ...[]byte) error {
	return r.write("open", data, func() error { return r.EventLog.Open(ctx, name, owner, lease, ttl, data...) })
}

func (r *recordingLog) Append(ctx context.Context, name, owner string, data ...[]byte) (uint64, error) {
	var i uint64
	err := r.write("append", data, func() (err error) {
		i, err = r.EventLog.Append(ctx, name, owner, data...)
		return err
	})
	return i, err
}

func (r *recordingLog) Finish(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	return r.write("finish", data, func() error { return r.EventLog.Finish(ctx, name, owner, ttl, data...) })
}

func (r *recordingLog) recorded() []logWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]logWrite(nil), r.writes...)
}

// startLive runs req detached in the background without waiting for any
// event (a test that holds the store's writes cannot wait for one).
func startLive(ctx context.Context, te *testBed, req *toolwirev1.ExecuteBatchRequest) *liveBatch {
	req.Options = &toolwirev1.BatchOptions{Detach: true}
	lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
	go func() { lb.done <- te.e.Run(ctx, te.reg.Snapshot(), req, lb) }()
	return lb
}

// checkStream checks that events are numbered 1, 2, … with BatchFinished
// last, and that the store's log holds the same events, each once.
func checkStream(tb testing.TB, el store.EventLog, caller string, events []*toolwirev1.ExecuteBatchResponse) {
	tb.Helper()
	if len(events) == 0 || events[len(events)-1].GetFinished() == nil {
		tb.Fatalf("%d events, the last not BatchFinished", len(events))
	}
	for i, ev := range events {
		if ev.GetSeq() != uint64(i+1) {
			tb.Fatalf("event %d (%T) has seq %d", i+1, ev.GetEvent(), ev.GetSeq())
		}
	}
	name := logName(caller, batchIDOf(tb, events))
	var n int
	for ent, err := range el.After(context.Background(), name, 0) {
		if err != nil {
			tb.Fatalf("reading the log back: %v", err)
		}
		if n >= len(events) {
			tb.Fatalf("the log holds more than the %d events sent: entry %d", len(events), ent.Index)
		}
		got := &toolwirev1.ExecuteBatchResponse{}
		if err := proto.Unmarshal(ent.Data, got); err != nil || ent.Index != uint64(n+1) || !proto.Equal(got, events[n]) {
			tb.Fatalf("entry %d of the log (%v) is not event %d sent: %v\nvs %v", ent.Index, err, n+1, got, events[n])
		}
		n++
	}
	if n != len(events) {
		tb.Fatalf("the log holds %d events, the stream got %d", n, len(events))
	}
}

// TestDetachedEventsAreWrittenInGroups: while one write of a detached
// batch's events is under way, what its calls emit queues and goes in the
// next write, together. The first Append is held until three calls have
// ended; then their results (and the CallStarted the first write did not
// carry) go in one write, and the batch costs four writes at most, where
// one write per event would be ten.
func TestDetachedEventsAreWrittenInGroups(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	rl := newRecordingLog(m)
	rl.holdWrite = 1
	te := newTestBedWith(t, Config{}, Deps{Idempotency: m, Vars: m, EventLog: rl})
	lb := startLive(as("alice"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("a", "hold", ""), call("b", "hold", ""), call("c", "hold", "")}})
	<-rl.entered
	for range 3 {
		<-te.hold.started // each call's CallStarted was queued before its tool ran
	}
	// BatchAccepted was stored with the log's Open, and read at once.
	waitFor(t, func() bool { return len(lb.snapshot()) == 1 })
	b, err := te.e.lookup(as("alice"), batchIDOf(t, lb.snapshot()))
	if err != nil {
		t.Fatal(err)
	}
	first := rl.recorded()
	if len(first) != 1 || first[0].op != "open" {
		t.Fatalf("writes before the held Append: %+v, want the Open", first)
	}
	te.hold.releaseAll()
	// The held write carries one or more CallStarted; the rest, and the
	// three results, queue behind it.
	held := len(rl.held)
	if held < 1 || held > 3 {
		t.Fatalf("the held Append carries %d events, want 1 to 3 CallStarted", held)
	}
	waitFor(t, func() bool { return b.out.Queued() == 3+(3-held) })
	if got := lb.snapshot(); len(got) != 1 {
		t.Fatalf("%d events reached the stream while the store had taken only BatchAccepted", len(got))
	}
	close(rl.release)
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, m, "alice", events)
	writes := rl.recorded()
	if len(writes) > 4 {
		t.Fatalf("%d writes for %d events (%+v): the events queued behind the held write were not written together", len(writes), len(events), writes)
	}
	// One write carried all three results.
	var results []int
	for k, w := range writes {
		for _, s := range w.seqs {
			if events[s-1].GetResult() != nil {
				results = append(results, k)
			}
		}
	}
	if len(results) != 3 || results[0] != results[2] || results[0] < 2 {
		t.Fatalf("the results went in writes %v of %+v, want all in one write after the held one", results, writes)
	}
	if last := writes[len(writes)-1]; last.op != "finish" || last.seqs[len(last.seqs)-1] != uint64(len(events)) {
		t.Fatalf("the last write %+v, want the Finish carrying BatchFinished (seq %d)", last, len(events))
	}
}

// TestFailedGroupWriteDeliversNothing: a write the store refuses delivers
// none of its events: the stream gets nothing past what the store holds
// while the write is failing, nor while the next write, which carries the
// failed group again with what followed, is under way; then it gets every
// event once, in order.
func TestFailedGroupWriteDeliversNothing(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	rl := newRecordingLog(m)
	rl.holdWrite = 2
	failed := make(chan struct{})
	rl.fail = func(op string, n int) (error, error) {
		if op == "append" && n == 1 {
			defer close(failed)
			return errors.New("the store hiccupped"), nil
		}
		return nil, nil
	}
	te := newTestBedWith(t, Config{}, Deps{Idempotency: m, Vars: m, EventLog: rl})
	lb := startLive(as("alice"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "hold", "")}})
	<-te.hold.started
	<-failed
	waitFor(t, func() bool { return len(rl.recorded()) == 2 }) // the Open, the failed Append
	// What the store holds, BatchAccepted, may or may not have reached the
	// stream yet (its reader runs on its own); nothing past it may have.
	pastAccepted := func() int {
		got := lb.snapshot()
		if len(got) > 0 && got[0].GetAccepted() != nil {
			return len(got) - 1
		}
		return len(got)
	}
	if n := pastAccepted(); n != 0 {
		t.Fatalf("the stream got %d events past BatchAccepted while the store held BatchAccepted alone", n)
	}
	te.hold.releaseAll()
	<-rl.entered // the next write, with the failed group, is under way
	if n := pastAccepted(); n != 0 {
		t.Fatalf("the stream got %d events past BatchAccepted before the store took the failed group again", n)
	}
	close(rl.release)
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, m, "alice", events)
	if r := results(t, events)["a"]; r.GetIsError() {
		t.Fatalf("the call's result %v, want its own", r)
	}
	w := rl.recorded()
	if w[1].err == nil || len(w[1].seqs) != 1 || w[2].seqs[0] != w[1].seqs[0] {
		t.Fatalf("writes %+v: want the failed group written again first in the next", w)
	}
}

// TestLostAnswersAreNotWrittenTwice: writes that landed but whose answers
// were lost (a timeout) are not written again: the log holds each event
// once, as the stream got it.
func TestLostAnswersAreNotWrittenTwice(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	rl := newRecordingLog(m)
	lost := errors.New("i/o timeout")
	rl.fail = func(op string, n int) (error, error) {
		if n == 1 && (op == "append" || op == "finish") {
			return nil, lost
		}
		return nil, nil
	}
	te := newTestBedWith(t, Config{}, Deps{Idempotency: m, Vars: m, EventLog: rl})
	events := te.runAs(t, "alice", &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{call("a", "read", `{"ms":1}`), call("b", "ticker", `{"ms":60}`), call("c", "write", `{"ms":1}`)},
		Options: &toolwirev1.BatchOptions{Detach: true}})
	checkStream(t, m, "alice", events)
	var lostOps int
	for _, w := range rl.recorded() {
		if errors.Is(w.err, lost) {
			lostOps++
		}
	}
	if lostOps != 2 {
		t.Fatalf("%d writes lost their answers, want 2 (an Append and the Finish): %+v", lostOps, rl.recorded())
	}
}

// TestConcurrentDetachedBatchesStayInOrder: many detached batches at once,
// with parallel calls and progress, on one store (bolt: their writes share
// commits): every stream is numbered densely and in order, and the log
// holds exactly what it got.
func TestConcurrentDetachedBatchesStayInOrder(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return memory.New(memory.Options{}) },
		"bolt": func(t *testing.T) store.Store {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "log.db"), bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			te := newTestBedWith(t, Config{}, Deps{Idempotency: s, Vars: s, EventLog: s})
			const batches = 16
			var wg sync.WaitGroup
			got := make([][]*toolwirev1.ExecuteBatchResponse, batches)
			errs := make([]error, batches)
			for i := range batches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = te.runErr(as(fmt.Sprint("c", i)), &toolwirev1.ExecuteBatchRequest{
						Calls: []*toolwirev1.ToolCall{
							call("r1", "read", `{"ms":1}`), call("r2", "read", `{"ms":2}`), call("t", "ticker", `{"ms":50}`),
							call("w", "write", `{"ms":1}`), call("r3", "read", ""),
						},
						Options: &toolwirev1.BatchOptions{Detach: true}})
				}()
			}
			wg.Wait()
			for i := range batches {
				if errs[i] != nil {
					t.Fatalf("batch %d: %v", i, errs[i])
				}
				checkStream(t, s, fmt.Sprint("c", i), got[i])
				if n := len(results(t, got[i])); n != 5 {
					t.Fatalf("batch %d: %d results, want 5", i, n)
				}
			}
			if b, ok := s.(*bolt.Store); ok {
				t.Logf("bolt: %d commits for %d batches", b.Commits(), batches)
			}
		})
	}
}

// TestSlowOwnStreamReadsTheStore: the batch's own stream, stuck while the
// batch writes more than is kept for it, reads what it missed from the
// store, then follows: every event once, in order.
func TestSlowOwnStreamReadsTheStore(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	te := newTestBedWith(t, Config{}, Deps{Idempotency: m, Vars: m, EventLog: m})
	var calls []*toolwirev1.ToolCall
	for i := range 2 * maxKeptEvents {
		calls = append(calls, call(fmt.Sprint("c", i), "read", ""))
	}
	stuck := make(chan struct{})
	var mu sync.Mutex
	var events []*toolwirev1.ExecuteBatchResponse
	done := make(chan error, 1)
	go func() {
		done <- te.e.Run(as("alice"), te.reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: calls, Options: &toolwirev1.BatchOptions{Detach: true}},
			SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
				if ev.GetSeq() == 2 {
					<-stuck
				}
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
				return nil
			}))
	}()
	// The batch runs to its end while its stream is stuck at its second event.
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(events) == 0 {
			return false
		}
		info, err := m.Stat(context.Background(), logName("alice", events[0].GetAccepted().GetBatchId()))
		return err == nil && info.Finished
	})
	close(stuck)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkStream(t, m, "alice", events)
	if n := len(results(t, events)); n != len(calls) {
		t.Fatalf("%d results, want %d", n, len(calls))
	}
}
