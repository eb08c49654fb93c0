package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// The fault tests run against a redis-server of their own, which they
// stop, restart, freeze (SIGSTOP) and thaw (SIGCONT): the faults an
// operator's store has.

// openRedis opens a store (a replica's client) on srv, with a short
// breaker cool-down so that a restarted server is used again soon.
func openRedis(tb testing.TB, srv *testenv.RedisServer) *redis.Store {
	tb.Helper()
	st, err := redis.Open(context.Background(), srv.URL(), redis.Options{BreakerCooldown: 100 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// idempotencyNote is details.idempotency of res; nil without one.
func idempotencyNote(tb testing.TB, res *toolwirev1.CallResult) map[string]any {
	tb.Helper()
	if res.GetDetails() == "" {
		return nil
	}
	var det struct {
		Idempotency map[string]any `json:"idempotency"`
	}
	if err := json.Unmarshal([]byte(res.GetDetails()), &det); err != nil {
		tb.Fatalf("details %q: %v", res.GetDetails(), err)
	}
	return det.Idempotency
}

// TestKeyedCallsSurviveStoreOutage: Redis stops while keyed calls run and
// is restarted after they have finished. Their callers get their results
// (saying the record is held, not yet written); a resend on the same
// replica meanwhile replays the held record, one to a second replica does
// not run; once Redis is back the records land, and resends to either
// replica are replayed. Nothing runs twice.
func TestKeyedCallsSurviveStoreOutage(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newCounter()
	c.started = make(chan int, 16)
	bump := c.tool("bump")
	bump.Annotations.ReadOnly = true // one lane: the calls run at once
	replica := func() *testBed {
		st := openRedis(t, srv)
		return newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st}, bump)
	}
	a, b := replica(), replica()

	const n = 3
	req := func(prefix string) *toolwirev1.ExecuteBatchRequest {
		r := &toolwirev1.ExecuteBatchRequest{Options: &toolwirev1.BatchOptions{MaxParallel: n}}
		for i := range n {
			r.Calls = append(r.Calls, keyed(fmt.Sprint(prefix, i), "bump", fmt.Sprintf(`{"n":%d,"wait":true}`, i), fmt.Sprint("k", i)))
		}
		return r
	}
	first := make(chan []*toolwirev1.ExecuteBatchResponse, 1)
	go func() {
		events, _ := a.runErr(context.Background(), req("a"))
		first <- events
	}()
	for range n {
		<-c.started // every call runs, holding its claim
	}
	srv.Stop() // the store goes away mid-call
	close(c.gate)
	got := results(t, <-first)
	for i := range n {
		res := got[fmt.Sprint("a", i)]
		if res.GetIsError() {
			t.Fatalf("call %d: %v", i, res)
		}
		note := idempotencyNote(t, res)
		if note["recorded"] != false || note["held"] != true {
			t.Errorf("call %d's details.idempotency = %v; want it to say the record is held, not yet written", i, note)
		}
	}
	if h := a.e.Stats().HeldRecords; h != n {
		t.Errorf("replica A holds %d records, want %d", h, n)
	}

	// During the outage: a resend to A replays what A holds; one to B
	// cannot claim its key and does not run.
	again := results(t, a.run(t, req("r")))
	for i := range n {
		if res := again[fmt.Sprint("r", i)]; !res.GetReplayed() {
			t.Errorf("resend to A during the outage, call %d: %v; want it replayed from the held record", i, res)
		}
	}
	other := results(t, b.run(t, req("b")))
	for i := range n {
		if res := other[fmt.Sprint("b", i)]; res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INTERNAL {
			t.Errorf("resend to B during the outage, call %d: %v; want INTERNAL, not run", i, res)
		}
	}

	srv.Start()
	waitFor(t, func() bool { return a.e.Stats().HeldRecords == 0 })
	for _, te := range []*testBed{a, b} {
		after := results(t, te.run(t, req("z")))
		for i := range n {
			if res := after[fmt.Sprint("z", i)]; !res.GetReplayed() {
				t.Errorf("resend after the outage, call %d: %v; want it replayed", i, res)
			}
		}
	}
	for i := range n {
		if runs := c.count(i); runs != 1 {
			t.Errorf("call %d ran %d times, want 1", i, runs)
		}
	}
}

// TestKeyedCallOutlivesItsStoresMemory: Redis is restarted having lost
// everything (no persistence) while a keyed call runs: the claim is gone,
// so the record is written under a new claim of the same owner, and a
// resend is replayed, not run again.
func TestKeyedCallOutlivesItsStoresMemory(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := newCounter()
	c.started = make(chan int, 1)
	st := openRedis(t, srv)
	te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st}, c.tool("bump"))
	done := make(chan []*toolwirev1.ExecuteBatchResponse, 1)
	go func() {
		events, _ := te.runErr(context.Background(), one(keyed("a", "bump", `{"n":1,"wait":true}`, "k")))
		done <- events
	}()
	<-c.started
	srv.Flush() // what a restart without persistence leaves
	close(c.gate)
	if res := results(t, <-done)["a"]; res.GetIsError() || idempotencyNote(t, res) != nil {
		t.Fatalf("first call: %v; want a success, recorded", res)
	}
	if res := results(t, te.run(t, one(keyed("b", "bump", `{"n":1,"wait":true}`, "k"))))["b"]; !res.GetReplayed() {
		t.Fatalf("resend: %v; want it replayed", res)
	}
	if runs := c.count(1); runs != 1 {
		t.Errorf("the call ran %d times, want 1", runs)
	}
}

// TestDetachedBatchesRideOutAStoreStall: Redis freezes (SIGSTOP) for less
// than the batches' lease while their calls finish. The owner buffers
// what the store does not take and writes it once Redis answers again:
// every batch ends with its calls' own results, none cancelled as owner
// lost, and every stream gets BatchFinished.
func TestDetachedBatchesRideOutAStoreStall(t *testing.T) {
	srv := testenv.StartRedis(t)
	st := openRedis(t, srv)
	c := newCounter()
	c.started = make(chan int, 16)
	te := newTestBedWith(t, Config{BatchLease: 10 * time.Second}, Deps{Idempotency: st, Vars: st, EventLog: st}, c.tool("bump"))
	const n = 4
	var live []*liveBatch
	for i := range n {
		lb := startDetached(t, as("alice"), te, one(call(fmt.Sprint("c", i), "bump", fmt.Sprintf(`{"n":%d,"wait":true}`, i))))
		<-c.started
		live = append(live, lb)
	}
	srv.Freeze()
	close(c.gate) // the calls finish while the store does not answer
	// The stall: several lease renewals' worth (each tick is 500ms), well
	// short of the lease.
	time.Sleep(2 * time.Second)
	srv.Thaw()
	for i, lb := range live {
		events, err := drain(lb)
		if err != nil {
			t.Fatalf("batch %d's stream: %v", i, err)
		}
		res := results(t, events)[fmt.Sprint("c", i)]
		if res.GetIsError() || text(res) != fmt.Sprintf("ran n=%d (run 1)", i) {
			t.Errorf("batch %d's call: %v; want its own result", i, res)
		}
		if f := finishedOf(events); f.GetSucceeded() != 1 || f.GetCancelled() != 0 {
			t.Errorf("batch %d: last event %v; want BatchFinished, 1 succeeded", i, events[len(events)-1])
		}
	}
}

// TestAttachAfterTheLastEvent: attaching to a finished batch after its
// last event (BatchFinished) ends cleanly with nothing to send, on every
// store.
func TestAttachAfterTheLastEvent(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return memory.New(memory.Options{}) },
		"bolt": func(t *testing.T) store.Store {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "s.db"), bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) store.Store { return openRedis(t, testenv.StartRedis(t)) },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st, EventLog: st})
			var first recorder
			req := one(call("e", "echo", `{"text":"hi"}`))
			req.Options = &toolwirev1.BatchOptions{Detach: true}
			if err := te.e.Run(as("alice"), te.reg.Snapshot(), req, &first); err != nil {
				t.Fatal(err)
			}
			last := first.events[len(first.events)-1]
			if last.GetFinished() == nil {
				t.Fatalf("last event %v, want BatchFinished", last)
			}
			var rec recorder
			if err := te.e.Attach(as("alice"), batchIDOf(t, first.events), last.GetSeq(), &rec); err != nil {
				t.Fatalf("Attach after the last event: %v; want it to end with nothing to send", err)
			}
			if len(rec.events) != 0 {
				t.Errorf("Attach after the last event sent %v", rec.events)
			}
		})
	}
}

// failingIdem is a memory store whose Complete and Claim can be made to
// fail, for the outcomes a real store's outage rarely produces on cue.
type failingIdem struct {
	store.Idempotency
	complete func() error         // nil: the store's own
	claim    func() (bool, error) // replaces Claims after the first when set: (in flight?, error)
	claims   atomic.Int64
}

func (f *failingIdem) Complete(ctx context.Context, key, owner string, result []byte, ttl time.Duration) error {
	if f.complete != nil {
		return f.complete()
	}
	return f.Idempotency.Complete(ctx, key, owner, result, ttl)
}

func (f *failingIdem) Claim(ctx context.Context, key, fp, owner string, lease, ttl time.Duration) (store.Claim, error) {
	if f.claims.Add(1) > 1 && f.claim != nil {
		inFlight, err := f.claim()
		if err != nil {
			return store.Claim{}, err
		}
		if inFlight {
			return store.Claim{State: store.InFlight}, nil
		}
	}
	return f.Idempotency.Claim(ctx, key, fp, owner, lease, ttl)
}

// TestRecordTakenOverSaysNotRecorded: a call whose key another replica
// took over while it ran cannot be recorded, and its result says a retry
// may run it again; nothing is held.
func TestRecordTakenOverSaysNotRecorded(t *testing.T) {
	t.Parallel()
	f := &failingIdem{Idempotency: memory.New(memory.Options{})}
	f.complete = func() error { return store.ErrLeaseLost }
	f.claim = func() (bool, error) { return true, nil } // another owner's live claim
	c := newCounter()
	te := newTestBedWith(t, Config{}, Deps{Idempotency: f}, c.tool("bump"))
	res := results(t, te.run(t, one(keyed("a", "bump", `{"n":1}`, "k"))))["a"]
	note := idempotencyNote(t, res)
	if res.GetIsError() || note["recorded"] != false || note["held"] != false ||
		!strings.Contains(fmt.Sprint(note["note"]), "a retry may run again") {
		t.Fatalf("result %v; want a success whose details.idempotency says it is not recorded and a retry may run again", res)
	}
	if h := te.e.Stats().HeldRecords; h != 0 {
		t.Errorf("%d records held; a record that can never be written is not held", h)
	}
}

// TestHeldRecordsAreBounded: past maxHeldRecords, a record the store does
// not take is not held, and its result says it is lost.
func TestHeldRecordsAreBounded(t *testing.T) {
	t.Parallel()
	f := &failingIdem{Idempotency: memory.New(memory.Options{})}
	f.complete = func() error { return errors.New("the store does not answer") }
	c := newCounter()
	te := newTestBedWith(t, Config{}, Deps{Idempotency: f}, c.tool("bump"))
	for i := range maxHeldRecords {
		if !te.e.heldRecs.hold(&heldRecord{key: fmt.Sprint("filler", i), stored: []byte("x"), at: time.Now()}) {
			t.Fatalf("record %d was not held", i)
		}
	}
	res := results(t, te.run(t, one(keyed("a", "bump", `{"n":1}`, "k"))))["a"]
	if note := idempotencyNote(t, res); note["recorded"] != false || note["held"] != false {
		t.Fatalf("result %v; want details.idempotency saying it is not recorded, not held", res)
	}
	if h := te.e.Stats().HeldRecords; h != maxHeldRecords {
		t.Errorf("%d records held, want the bound, %d", h, maxHeldRecords)
	}
}

// TestUnstoredEventsBounded: while the store does not answer, what all
// detached batches buffer for it stays within the server's bound; the
// batches past it are lost (their calls cancelled), the others ride the
// stall out, and nothing stays counted once they have ended. Without the
// bound, 20 batches of 60 results of 200 KiB held 240 MiB within 4 s of a
// frozen Redis, each under its own 16 MiB.
func TestUnstoredEventsBounded(t *testing.T) {
	srv := testenv.StartRedis(t)
	st := openRedis(t, srv)
	te := newTestBedWith(t, Config{BatchLease: 30 * time.Second}, Deps{Idempotency: st, Vars: st, EventLog: st})
	const bound = 32 << 20
	te.e.maxUnstored = bound
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var live []*liveBatch
	for range 20 {
		// The first call holds each batch until the store is frozen (its
		// log is opened before), so that no big result is stored before
		// and handed to the test's own reader, whose copies are heap too.
		// (A 1.5 s call held it once: on a loaded machine, starting 20
		// batches took longer, and 112 MiB of results reached the test.)
		req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("w", "hold", "")}}
		for i := range 60 {
			req.Calls = append(req.Calls, call(fmt.Sprint(i), "big", `{"n":100000}`))
		}
		live = append(live, startDetached(t, as("alice"), te, req))
	}
	srv.Freeze()
	te.hold.releaseAll()
	time.Sleep(4 * time.Second)
	held, n := heap()-before, te.e.unstored.Load()
	srv.Thaw()
	if n > bound {
		t.Errorf("detached batches buffered %d bytes for the frozen store, over the bound of %d", n, bound)
	}
	if held > 3*bound {
		t.Errorf("the heap grew by %d MiB while the store was frozen, with a bound of %d MiB", held>>20, bound>>20)
	}
	for _, lb := range live {
		drain(lb)
	}
	waitFor(t, func() bool { return te.e.unstored.Load() == 0 })
	t.Logf("heap +%d MiB while frozen, %d bytes waiting for the store", held>>20, n)
}

// TestNotRecordedNoteSurvivesAFullResult: a result at max_result_bytes
// whose record the store refuses keeps its details.idempotency note, its
// room taken from the content; bounding it left the note out, so the
// caller could not tell that a retry may run the call again.
func TestNotRecordedNoteSurvivesAFullResult(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{true, false} {
		f := &failingIdem{Idempotency: memory.New(memory.Options{})}
		f.complete = func() error { return errors.New("write toolwire.db: no space left on device") }
		big := tools.Tool{Name: "big1m", Description: "returns 1 MiB", InputSchema: json.RawMessage(`{"type":"object"}`),
			Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
				return tools.Text(strings.Repeat("x", 1<<20)), nil
			}}
		te := newTestBedWith(t, Config{}, Deps{Idempotency: f}, big)
		if !held {
			for i := range maxHeldRecords {
				te.e.heldRecs.hold(&heldRecord{key: fmt.Sprint("filler", i), stored: []byte("x"), at: time.Now()})
			}
		}
		res := results(t, te.run(t, one(keyed("a", "big1m", "", "k"))))["a"]
		note := idempotencyNote(t, res)
		if note["recorded"] != false || note["held"] != held || !strings.Contains(fmt.Sprint(note["note"]), "no space left on device") {
			t.Fatalf("held %v: details %q; want details.idempotency saying it is not recorded, and why", held, res.GetDetails())
		}
		if limit := te.e.cfg.MaxResultBytes; payload(res) > limit || !res.GetTruncated() {
			t.Errorf("held %v: %d bytes, truncated %v; want it truncated within %d", held, payload(res), res.GetTruncated(), limit)
		}
	}
}

// fullRedis makes srv full (maxmemory below what it holds, with
// noeviction: it refuses what would grow its memory) and returns a func
// that gives it room again.
func fullRedis(tb testing.TB, srv *testenv.RedisServer) (free func()) {
	tb.Helper()
	srv.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	srv.Do("CONFIG", "SET", "maxmemory", "1")
	return func() { srv.Do("CONFIG", "SET", "maxmemory", "0") }
}

// TestDetachedBatchOutlastsAFullRedis: Redis fills (maxmemory, noeviction)
// while a detached batch's call runs, for three leases. The batch stays
// its owner's (the lease renewal grows nothing, and a full Redis takes
// it), its events wait in the owner's memory, and once Redis has room its
// stream gets the call's own result: it is not ended as owner lost, its
// call marked to be sent again. A new detached batch is refused
// UNAVAILABLE while Redis is full, and opens no log. Redis used to refuse
// the renewal and take the opening: the batch was ended as owner lost two
// leases in, and a new batch opened a log it could not write.
func TestDetachedBatchOutlastsAFullRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	st := openRedis(t, srv)
	c := newCounter()
	c.started = make(chan int, 16)
	const lease = time.Second
	te := newTestBedWith(t, Config{BatchLease: lease}, Deps{Idempotency: st, Vars: st, EventLog: st}, c.tool("bump"))
	lb := startDetached(t, as("alice"), te, one(call("c", "bump", `{"n":1,"wait":true}`)))
	<-c.started
	free := fullRedis(t, srv)
	keys := srv.Do("DBSIZE")
	req := one(call("e", "echo", `{"text":"hi"}`))
	req.Options = &toolwirev1.BatchOptions{Detach: true}
	if _, err := te.runErr(as("alice"), req); CodeOf(err) != Unavailable {
		t.Errorf("a new detached batch on a full Redis: %v; want Unavailable", err)
	}
	if got := srv.Do("DBSIZE"); got != keys {
		t.Errorf("keys in Redis: %s before the refused batch, %s after; want none added", keys, got)
	}
	close(c.gate) // the call ends while Redis takes no event
	time.Sleep(3 * lease)
	if evs := lb.snapshot(); len(results(t, evs)) > 0 {
		t.Fatalf("the stream got a result while Redis was full: the fault was not met (%d events)", len(evs))
	}
	if info, err := st.Stat(context.Background(), logName("alice", batchIDOf(t, lb.snapshot()))); err != nil || info.Finished || !info.Owned {
		t.Fatalf("the batch's log after three leases of a full Redis: %+v %v; want it running, owned", info, err)
	}
	free()
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	if res := results(t, events)["c"]; res.GetIsError() || text(res) != "ran n=1 (run 1)" {
		t.Errorf("the call's result: %v %q; want its own", res.GetErrorKind(), text(res))
	}
	if f := finishedOf(events); f.GetSucceeded() != 1 || f.GetCancelled() != 0 {
		t.Errorf("BatchFinished %v; want 1 succeeded", f)
	}
	sameEvents(t, "attachment", events, attachAll(t, te, batchIDOf(t, events)))
}

// TestReaderOfAnUnendableLostBatchEnds: the replica running a detached
// batch is lost, and Redis is full, so no reader can end its log (the
// takeover and the owner-lost results are writes it refuses). An
// attachment on another replica ends UNAVAILABLE once it has tried for a
// lease, saying the store failed; it used to ask again every 100 ms for
// as long as its client waited (a CLI's stream hung ten minutes, and on).
func TestReaderOfAnUnendableLostBatchEnds(t *testing.T) {
	srv := testenv.StartRedis(t)
	st := openRedis(t, srv)
	const lease = time.Second
	te := newTestBedWith(t, Config{BatchLease: lease}, Deps{Idempotency: st, Vars: st, EventLog: st})
	ctx := context.Background()
	// The lost replica's log: opened with BatchAccepted, a short lease
	// that no one renews.
	accepted, _ := proto.Marshal(&toolwirev1.ExecuteBatchResponse{Seq: 1, Event: &toolwirev1.ExecuteBatchResponse_Accepted{
		Accepted: &toolwirev1.BatchAccepted{BatchId: "b1", Lanes: []*toolwirev1.Lane{{CallIds: []string{"c"}}}}}})
	name := logName("alice", "b1")
	if err := st.Open(ctx, name, "lost-replica", 100*time.Millisecond, time.Hour, accepted); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { info, err := st.Stat(ctx, name); return err == nil && !info.Owned })
	fullRedis(t, srv)
	actx, cancel := context.WithTimeout(as("alice"), 60*time.Second)
	defer cancel()
	var rec recorder
	err := te.e.Attach(actx, "b1", 0, &rec)
	if CodeOf(err) != Unavailable || actx.Err() != nil {
		t.Fatalf("Attach to a lost batch the store will not let end: %v; want Unavailable before the client gives up", err)
	}
	if len(rec.events) != 1 || rec.events[0].GetAccepted() == nil {
		t.Errorf("Attach sent %v; want BatchAccepted", rec.events)
	}
}

// TestDetachedBatchWhoseLogTheStoreLoses: Redis loses every key (as one
// restarted without persistence does) while a detached batch runs, with
// an attachment on another replica. The owner cancels the batch (its
// call sees its context end) and lets it go; the attachment and the
// batch's own stream end NotFound saying the store lost the events, not
// only that they expired; a cancel through either replica is NotFound.
func TestDetachedBatchWhoseLogTheStoreLoses(t *testing.T) {
	srv := testenv.StartRedis(t)
	sa, sb := openRedis(t, srv), openRedis(t, srv)
	c := newCounter()
	c.started = make(chan int, 16)
	a := newTestBedWith(t, Config{}, Deps{Idempotency: sa, Vars: sa, EventLog: sa, Replica: "a"}, c.tool("bump"))
	b := newTestBedWith(t, Config{}, Deps{Idempotency: sb, Vars: sb, EventLog: sb, Replica: "b"})
	lb := startDetached(t, as("alice"), a, one(call("c", "bump", `{"n":1,"wait":true}`)))
	<-c.started
	id := batchIDOf(t, lb.snapshot())
	attached := make(chan error, 1)
	var rec recorder
	go func() { attached <- b.e.Attach(as("alice"), id, 0, &rec) }()
	waitFor(t, func() bool { return len(rec.get()) > 0 })
	srv.Do("FLUSHALL")
	for who, err := range map[string]error{"the attachment on B": <-attached, "the batch's own stream": <-lb.done} {
		if CodeOf(err) != NotFound || !strings.Contains(err.Error(), "lost by it") {
			t.Errorf("%s: %v; want NotFound saying the store lost the events", who, err)
		}
	}
	waitFor(t, func() bool { return a.e.Stats().CallsRunning == 0 })
	for name, te := range map[string]*testBed{"A": a, "B": b} {
		if err := te.e.Cancel(as("alice"), id, ""); CodeOf(err) != NotFound {
			t.Errorf("a cancel through %s: %v; want NotFound", name, err)
		}
	}
}

// TestAStallLogsEachBatchOnce: Redis freezes for several lease renewals
// while a detached batch runs. Its replica logs the failed renewal once
// and the renewal that works again once, not each failure: at every tick
// (500 ms), a 20 s stall wrote 37 warnings for one batch, a thousand
// batches two thousand lines a second.
func TestAStallLogsEachBatchOnce(t *testing.T) {
	srv := testenv.StartRedis(t)
	st := openRedis(t, srv)
	c := newCounter()
	c.started = make(chan int, 1)
	var logs logbuf.Buffer
	te := newTestBedWith(t, Config{BatchLease: 10 * time.Second},
		Deps{Idempotency: st, Vars: st, EventLog: st, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, c.tool("bump"))
	lb := startDetached(t, as("alice"), te, one(call("c", "bump", `{"n":1,"wait":true}`)))
	<-c.started
	srv.Freeze()
	time.Sleep(3 * time.Second) // six ticks, short of the lease
	srv.Thaw()
	time.Sleep(2 * time.Second) // a renewal or more after the breaker's cool-down
	close(c.gate)
	if _, err := drain(lb); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "could not renew a detached batch's lease"); n != 1 {
		t.Errorf("%d lines say a renewal failed; want 1\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "renewed a detached batch's lease again"); n != 1 {
		t.Errorf("%d lines say the lease was renewed again; want 1\n%s", n, logs.String())
	}
}
