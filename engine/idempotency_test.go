package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
)

// counter is a tool with a side effect the tests count: each run adds one
// to runs[n]. A call with "wait":true blocks until gate is closed.
type counter struct {
	mu      sync.Mutex
	runs    map[int]int
	started chan int // receives n as a run starts, when set
	gate    chan struct{}
}

func newCounter() *counter {
	return &counter{runs: map[int]int{}, gate: make(chan struct{})}
}

func (c *counter) count(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[n]
}

func (c *counter) tool(name string) tools.Tool {
	return tools.Tool{
		Name:        name,
		Description: "counts its runs",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"wait":{"type":"boolean"},"ms":{"type":"integer"},"x":{}},"required":["n"]}`),
		Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			var a struct {
				N    int
				Wait bool
				MS   int
			}
			_ = json.Unmarshal(call.Arguments, &a)
			c.mu.Lock()
			c.runs[a.N]++
			run := c.runs[a.N]
			c.mu.Unlock()
			if c.started != nil {
				c.started <- a.N
			}
			if a.Wait {
				select {
				case <-c.gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if a.MS > 0 {
				select {
				case <-time.After(time.Duration(a.MS) * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if a.N < 0 {
				return nil, fmt.Errorf("n=%d is negative (run %d)", a.N, run)
			}
			return &tools.Result{Content: []tools.Content{{Text: fmt.Sprintf("ran n=%d (run %d)", a.N, run)}},
				Details: json.RawMessage(`{"run":` + fmt.Sprint(run) + `}`)}, nil
		},
	}
}

func keyed(id, name, args, key string) *toolwirev1.ToolCall {
	c := call(id, name, args)
	c.IdempotencyKey = key
	return c
}

func one(c *toolwirev1.ToolCall) *toolwirev1.ExecuteBatchRequest {
	return &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{c}}
}

func finishedOf(events []*toolwirev1.ExecuteBatchResponse) *toolwirev1.BatchFinished {
	if len(events) == 0 {
		return nil
	}
	return events[len(events)-1].GetFinished()
}

func startedCount(events []*toolwirev1.ExecuteBatchResponse) int {
	n := 0
	for _, ev := range events {
		if ev.GetStarted() != nil {
			n++
		}
	}
	return n
}

// sameOutcome compares what the model reads of two results.
func sameOutcome(tb testing.TB, want, got *toolwirev1.CallResult) {
	tb.Helper()
	ignore := protocmp.IgnoreFields(&toolwirev1.CallResult{}, "call_id", "index", "replayed", "duration")
	if diff := cmp.Diff(want, got, protocmp.Transform(), ignore); diff != "" {
		tb.Errorf("replayed result differs (-want +got):\n%s", diff)
	}
}

func TestIdempotentCallIsReplayedNotRun(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"))
	first := results(t, te.run(t, one(keyed("a", "bump", `{"n":1,"x":{"b":1,"a":2}}`, "k1"))))["a"]
	if first.GetIsError() || first.GetReplayed() {
		t.Fatalf("first call: %v", first)
	}
	// The same call again, with the arguments' keys in another order, in a
	// batch beside another call: its result is replayed with the new ID and
	// index.
	events := te.run(t, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("other", "echo", `{"text":"hi"}`),
		keyed("b", "bump", `{ "x":{"a":2,"b":1}, "n":1 }`, "k1"),
	}})
	again := results(t, events)["b"]
	if !again.GetReplayed() || again.GetCallId() != "b" || again.GetIndex() != 1 {
		t.Fatalf("second call: replayed=%v id=%q index=%d; want a replay as call b, index 1", again.GetReplayed(), again.GetCallId(), again.GetIndex())
	}
	sameOutcome(t, first, again)
	if n := c.count(1); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
	if f := finishedOf(events); f.GetReplayed() != 1 || f.GetSucceeded() != 2 {
		t.Errorf("BatchFinished = %v, want 1 replayed of 2 succeeded", f)
	}
	if n := startedCount(events); n != 1 {
		t.Errorf("%d CallStarted events, want 1: a replay starts nothing", n)
	}
}

func TestIdempotencyKeysAreScopedByTool(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"), c.tool("bump2"))
	te.run(t, one(keyed("a", "bump", `{"n":1}`, "k")))
	r := results(t, te.run(t, one(keyed("b", "bump2", `{"n":1}`, "k"))))["b"]
	if r.GetReplayed() || c.count(1) != 2 {
		t.Fatalf("a key used with another tool was replayed (runs %d)", c.count(1))
	}
}

func TestIdempotencyKeysAreScopedByCaller(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"))
	req := one(keyed("a", "bump", `{"n":1}`, "k"))
	te.runAs(t, "alice", req)
	if r := results(t, te.runAs(t, "bob", req))["a"]; r.GetReplayed() {
		t.Fatal("bob got alice's result")
	}
	if r := results(t, te.runAs(t, "alice", req))["a"]; !r.GetReplayed() {
		t.Fatal("alice's own retry was not replayed")
	}
	if n := c.count(1); n != 2 {
		t.Fatalf("the tool ran %d times, want 2 (once per caller)", n)
	}
}

func TestSameKeyOtherArgumentsIsAConflict(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"))
	te.run(t, one(keyed("a", "bump", `{"n":1}`, "k")))
	r := results(t, te.run(t, one(keyed("b", "bump", `{"n":2}`, "k"))))["b"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_IDEMPOTENCY_CONFLICT || !strings.Contains(text(r), `"k"`) {
		t.Fatalf("result = %v %q, want an IDEMPOTENCY_CONFLICT naming the key", r.GetErrorKind(), text(r))
	}
	if c.count(2) != 0 {
		t.Fatal("the conflicting call ran")
	}
}

func TestDerivedKeyReplays(t *testing.T) {
	t.Parallel()
	c := newCounter()
	bump := c.tool("bump")
	type args struct {
		N int `json:"n"`
	}
	bump.IdempotencyKey = tools.KeyFrom(func(a args) (string, bool) { return fmt.Sprint("n", a.N), a.N > 0 })
	te := newTestBed(t, Config{}, bump)
	for _, id := range []string{"a", "b", "c"} {
		te.run(t, one(call(id, "bump", `{"n":1}`)))
		te.run(t, one(call(id, "bump", `{"n":0}`))) // no key derived: runs every time
	}
	if c.count(1) != 1 || c.count(0) != 3 {
		t.Fatalf("runs: n=1 %d times (want 1), n=0 %d times (want 3)", c.count(1), c.count(0))
	}
	// A key given with the call wins over the derived one.
	te.run(t, one(keyed("d", "bump", `{"n":1}`, "given")))
	if c.count(1) != 2 {
		t.Fatalf("a call with its own key was replayed under the derived key")
	}
}

func TestCallsThatNeverStartedAreNotRecorded(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"))
	r := results(t, te.run(t, one(keyed("a", "bump", `{"n":"one"}`, "k"))))["a"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS {
		t.Fatalf("result = %v, want INVALID_ARGUMENTS", r.GetErrorKind())
	}
	// Not a conflict, not a replay: the corrected call runs.
	r = results(t, te.run(t, one(keyed("b", "bump", `{"n":1}`, "k"))))["b"]
	if r.GetIsError() || r.GetReplayed() || c.count(1) != 1 {
		t.Fatalf("corrected call: %v, runs %d; want it run once", r, c.count(1))
	}
}

func TestToolErrorsAreReplayedTimeoutsRunAgain(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"))
	failed := results(t, te.run(t, one(keyed("a", "bump", `{"n":-1}`, "err"))))["a"]
	again := results(t, te.run(t, one(keyed("b", "bump", `{"n":-1}`, "err"))))["b"]
	if failed.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR || !again.GetReplayed() || c.count(-1) != 1 {
		t.Fatalf("tool error: %v, then replayed=%v, runs %d; want a TOOL_ERROR replayed", failed.GetErrorKind(), again.GetReplayed(), c.count(-1))
	}
	sameOutcome(t, failed, again)

	slow := keyed("c", "bump", `{"n":5,"ms":10000}`, "slow")
	slow.Timeout = durationpb.New(20 * time.Millisecond)
	if r := results(t, te.run(t, one(slow)))["c"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT {
		t.Fatalf("slow call: %v, want TIMEOUT", r.GetErrorKind())
	}
	slow.Timeout = durationpb.New(time.Minute)
	slow.Arguments = `{"n":5,"ms":10000}`
	// The retry runs again (and is cancelled by the client to end quickly).
	ctx, cancel := context.WithCancel(context.Background())
	stream := startBatch(t, ctx, te, one(slow))
	cancel()
	_, _ = drain(stream)
	// CallStarted comes just before the tool runs, so the run may be counted
	// after the client has seen its stream end.
	for deadline := time.Now().Add(10 * time.Second); c.count(5) < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := c.count(5); n != 2 {
		t.Fatalf("a call that timed out ran %d times after a retry, want 2: its key must be released", n)
	}
}

func TestDuplicateInFlightJoinsTheRunningCall(t *testing.T) {
	t.Parallel()
	c := newCounter()
	c.started = make(chan int, 10)
	te := newTestBed(t, Config{}, c.tool("bump"))
	req := one(keyed("a", "bump", `{"n":1,"wait":true}`, "k"))
	firstDone := make(chan *toolwirev1.CallResult)
	go func() {
		events, _ := te.runErr(context.Background(), req)
		firstDone <- results(t, events)["a"]
	}()
	<-c.started
	secondDone := make(chan []*toolwirev1.ExecuteBatchResponse)
	go func() {
		events, _ := te.runErr(context.Background(), req)
		secondDone <- events
	}()
	// The second waits for the first; releasing the tool ends both.
	select {
	case <-secondDone:
		t.Fatal("the duplicate finished while the first call was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(c.gate)
	first := <-firstDone
	events := <-secondDone
	second := results(t, events)["a"]
	if !second.GetReplayed() || c.count(1) != 1 {
		t.Fatalf("duplicate: replayed=%v, runs %d; want it to join the running call", second.GetReplayed(), c.count(1))
	}
	sameOutcome(t, first, second)
}

func TestWaitingForADuplicateEndsAtTheCallsDeadline(t *testing.T) {
	t.Parallel()
	c := newCounter()
	c.started = make(chan int, 10)
	te := newTestBed(t, Config{}, c.tool("bump"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := startBatch(t, ctx, te, one(keyed("a", "bump", `{"n":1,"wait":true}`, "k")))
	dup := keyed("b", "bump", `{"n":1,"wait":true}`, "k")
	dup.Timeout = durationpb.New(30 * time.Millisecond)
	r := results(t, te.run(t, one(dup)))["b"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(text(r), "in flight elsewhere") {
		t.Fatalf("result = %v %q, want a TIMEOUT saying it waited for the call in flight", r.GetErrorKind(), text(r))
	}
	cancel()
	_, _ = drain(stream)
	if n := c.count(1); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	c := newCounter()
	te := newTestBed(t, Config{}, c.tool("bump"))
	const n = 50
	got := make([]*toolwirev1.CallResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			events, err := te.runErr(context.Background(), one(keyed("a", "bump", `{"n":1,"ms":20}`, "k")))
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = results(t, events)["a"]
		})
	}
	wg.Wait()
	if runs := c.count(1); runs != 1 {
		t.Fatalf("%d concurrent duplicates ran the tool %d times, want 1", n, runs)
	}
	replayed := 0
	for _, r := range got {
		sameOutcome(t, got[0], r)
		if r.GetReplayed() {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Fatalf("%d results replayed, want %d", replayed, n-1)
	}
}

func TestExpiredLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	st := memory.New(memory.Options{})
	c := newCounter()
	te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st}, c.tool("bump"))
	// An owner that died mid-call left a claim behind.
	args := `{"n":1}`
	if _, err := st.Claim(context.Background(), `""/"bump"/k`, fingerprint(json.RawMessage(args)), "dead", 30*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	r := results(t, te.run(t, one(keyed("a", "bump", args, "k"))))["a"]
	if r.GetIsError() || r.GetReplayed() || c.count(1) != 1 {
		t.Fatalf("result %v, runs %d: want the call taken over and run once", r, c.count(1))
	}
}

func TestLeaseIsRenewedWhileTheToolRuns(t *testing.T) {
	t.Parallel()
	c := newCounter()
	c.started = make(chan int, 10)
	te := newTestBed(t, Config{IdempotencyLease: time.Second}, c.tool("bump"))
	req := one(keyed("a", "bump", `{"n":1,"wait":true}`, "k"))
	firstDone := make(chan struct{})
	go func() {
		_, _ = te.runErr(context.Background(), req)
		close(firstDone)
	}()
	<-c.started
	time.Sleep(3 * time.Second) // three leases: only renewal keeps the claim
	secondDone := make(chan *toolwirev1.CallResult)
	go func() {
		events, _ := te.runErr(context.Background(), req)
		secondDone <- results(t, events)["a"]
	}()
	time.Sleep(30 * time.Millisecond)
	close(c.gate)
	<-firstDone
	if r := <-secondDone; !r.GetReplayed() || c.count(1) != 1 {
		t.Fatalf("replayed=%v, runs %d: a running call's claim was taken over", r.GetReplayed(), c.count(1))
	}
}

func TestStoreFailureRunsNothing(t *testing.T) {
	t.Parallel()
	st := memory.New(memory.Options{})
	st.Close()
	c := newCounter()
	te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st}, c.tool("bump"))
	r := results(t, te.run(t, one(keyed("a", "bump", `{"n":1}`, "k"))))["a"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INTERNAL || !strings.Contains(text(r), "not run") || c.count(1) != 0 {
		t.Fatalf("result %v %q, runs %d; want INTERNAL, nothing run", r.GetErrorKind(), text(r), c.count(1))
	}
	// Calls without a key do not need the store.
	if r := results(t, te.run(t, one(call("b", "bump", `{"n":2}`))))["b"]; r.GetIsError() {
		t.Fatalf("a call without a key failed: %q", text(r))
	}
}

// sessionTool sets, reads or deletes the session variable "v".
func sessionTool() tools.Tool {
	return tools.Tool{
		Name:        "var",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"op":{"type":"string"},"value":{}}}`),
		Handler: func(ctx context.Context, c *tools.Call) (*tools.Result, error) {
			var a struct {
				Op    string
				Value json.RawMessage
			}
			_ = json.Unmarshal(c.Arguments, &a)
			s := c.Session()
			switch a.Op {
			case "set":
				return tools.Text("set"), s.Set(ctx, "v", a.Value)
			case "delete":
				return tools.Text("deleted"), s.Delete(ctx, "v")
			default:
				v, ok, err := s.Get(ctx, "v")
				if !ok {
					v = json.RawMessage("unset")
				}
				return tools.Text(string(v)), err
			}
		},
	}
}

func TestSessionVariables(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{}, sessionTool())
	in := func(caller, session string, calls ...*toolwirev1.ToolCall) map[string]*toolwirev1.CallResult {
		return results(t, te.runAs(t, caller, &toolwirev1.ExecuteBatchRequest{SessionId: session, Calls: calls}))
	}
	get := call("get", "var", `{}`)
	r := in("alice", "s1", call("set", "var", `{"op":"set","value":{"cart":[1,2]}}`), get)
	if got := text(r["get"]); got != `{"cart":[1,2]}` {
		t.Fatalf("a later call of the same batch read %q", got)
	}
	if got := text(in("alice", "s1", get)["get"]); got != `{"cart":[1,2]}` {
		t.Fatalf("a later batch read %q", got)
	}
	if got := text(in("alice", "s2", get)["get"]); got != "unset" {
		t.Fatalf("another session read %q", got)
	}
	if got := text(in("bob", "s1", get)["get"]); got != "unset" {
		t.Fatalf("another caller's session of the same ID read %q", got)
	}
	in("alice", "s1", call("del", "var", `{"op":"delete"}`))
	if got := text(in("alice", "s1", get)["get"]); got != "unset" {
		t.Fatalf("after delete, read %q", got)
	}
	// Without a session_id the tool gets a clear error, as a result.
	r = in("alice", "", get)
	if !r["get"].GetIsError() || !strings.Contains(text(r["get"]), "session_id") {
		t.Fatalf("without a session: %v %q, want an error naming session_id", r["get"].GetIsError(), text(r["get"]))
	}
}

// TestIdempotencyAndSessionsUseTheirOwnStores: records go to
// Deps.Idempotency and variables to Deps.Sessions, and an unset one
// gets an in-memory store of its own.
func TestIdempotencyAndSessionsUseTheirOwnStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		sessions *memory.Store // nil: the default
	}{
		{"both set", memory.New(memory.Options{})},
		{"sessions default", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			idem := memory.New(memory.Options{})
			deps := Deps{Idempotency: idem}
			if tc.sessions != nil {
				deps.Vars = tc.sessions
			}
			c := newCounter()
			te := newTestBedWith(t, Config{}, deps, c.tool("bump"), sessionTool())
			batch := func(calls ...*toolwirev1.ToolCall) map[string]*toolwirev1.CallResult {
				return results(t, te.run(t, &toolwirev1.ExecuteBatchRequest{SessionId: "s1", Calls: calls}))
			}
			batch(keyed("a", "bump", `{"n":1}`, "k"), call("set", "var", `{"op":"set","value":7}`))
			if got := text(batch(call("get", "var", `{}`))["get"]); got != "7" {
				t.Fatalf("a later batch read %q, want 7", got)
			}
			if _, ok, _ := idem.GetVar(ctx, `""/s1`, "v"); ok {
				t.Fatal("the session variable was written to the idempotency store")
			}
			if got, err := idem.Claim(ctx, `""/"bump"/k`, fingerprint(json.RawMessage(`{"n":1}`)), "x", time.Hour, time.Hour); err != nil || got.State != store.Completed {
				t.Fatalf("the idempotency store's record = %v, %v; want completed", got.State, err)
			}
			if tc.sessions == nil {
				return
			}
			if v, ok, _ := tc.sessions.GetVar(ctx, `""/s1`, "v"); !ok || string(v) != "7" {
				t.Fatalf("the sessions store holds %q, %v; want 7", v, ok)
			}
			if got, _ := tc.sessions.Claim(ctx, `""/"bump"/k`, "fp", "x", time.Hour, time.Hour); got.State != store.Claimed {
				t.Fatalf("the sessions store has a record (%v): it was written to the wrong store", got.State)
			}
		})
	}
}

// TestReplicasShareRecordsAndSessions runs two servers over one Redis
// (miniredis here; the fault tests use a real one): a call completed on one
// is replayed by the other, and a session variable set on one is read on the
// other.
func TestReplicasShareRecordsAndSessions(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rc := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rc.Close() })
	c := newCounter()
	sa, sb := redis.New(rc, redis.Options{}), redis.New(rc, redis.Options{})
	a := newTestBedWith(t, Config{}, Deps{Idempotency: sa, Vars: sa}, c.tool("bump"), sessionTool())
	b := newTestBedWith(t, Config{}, Deps{Idempotency: sb, Vars: sb}, c.tool("bump"), sessionTool())

	first := results(t, a.run(t, one(keyed("x", "bump", `{"n":1}`, "k"))))["x"]
	again := results(t, b.run(t, one(keyed("y", "bump", `{"n":1}`, "k"))))["y"]
	if !again.GetReplayed() || c.count(1) != 1 {
		t.Fatalf("on the other replica: replayed=%v, runs %d; want a replay", again.GetReplayed(), c.count(1))
	}
	sameOutcome(t, first, again)

	a.run(t, &toolwirev1.ExecuteBatchRequest{SessionId: "s", Calls: []*toolwirev1.ToolCall{call("set", "var", `{"op":"set","value":[1]}`)}})
	r := results(t, b.run(t, &toolwirev1.ExecuteBatchRequest{SessionId: "s", Calls: []*toolwirev1.ToolCall{call("get", "var", `{}`)}}))["get"]
	if text(r) != "[1]" {
		t.Fatalf("the other replica read %q, want [1]", text(r))
	}
}

func TestPanickingKeyFunctionIsAToolError(t *testing.T) {
	t.Parallel()
	c := newCounter()
	bump := c.tool("bump")
	bump.IdempotencyKey = func(json.RawMessage) (string, bool) { panic("no key for you") }
	te := newTestBed(t, Config{}, bump)
	r := results(t, te.run(t, one(call("a", "bump", `{"n":1}`))))["a"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR || !strings.Contains(text(r), "no key for you") || c.count(1) != 0 {
		t.Fatalf("result %v %q, runs %d; want a TOOL_ERROR and nothing run", r.GetErrorKind(), text(r), c.count(1))
	}
	// A key given with the call does not need the function.
	if r := results(t, te.run(t, one(keyed("b", "bump", `{"n":1}`, "k"))))["b"]; r.GetIsError() {
		t.Fatalf("a call with its own key: %q", text(r))
	}
}

// A keyed call sent again after a reload changed its tool's schema (a new
// required field, say) gets the result recorded under its key, not
// INVALID_ARGUMENTS: refused, its caller would never get the result of
// what ran, and might run it again under a new key. Only the same
// arguments replay; a key used before with other arguments, or never,
// leaves the refusal, and the key free.
func TestRefusedArgumentsReplayTheirRecord(t *testing.T) {
	t.Parallel()
	c := newCounter()
	bump := c.tool("bump")
	te := newTestBed(t, Config{}, bump)
	first := results(t, te.run(t, one(keyed("a", "bump", `{"n":1}`, "k1"))))["a"]
	if first.GetIsError() {
		t.Fatalf("first call: %v", first)
	}
	// Another keyed call, still running when the schema changes.
	c.started = make(chan int, 10)
	running := make(chan *toolwirev1.CallResult, 1)
	go func() { running <- results(t, te.run(t, one(keyed("r", "bump", `{"n":3,"wait":true}`, "k3"))))["r"] }()
	<-c.started
	// A reload: bump now needs "m" too.
	stricter := bump
	stricter.InputSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"m":{"type":"integer"}},"required":["n","m"]}`)
	if err := te.reg.Update([]string{"bump"}, stricter); err != nil {
		t.Fatal(err)
	}
	again := results(t, te.run(t, one(keyed("b", "bump", ` {"n":1} `, "k1"))))["b"]
	if !again.GetReplayed() || again.GetCallId() != "b" {
		t.Fatalf("sent again after the reload: %v %q; want its recorded result replayed", again.GetErrorKind(), text(again))
	}
	sameOutcome(t, first, again)
	// Sent again while it runs: waits for it, and gets its result.
	joined := make(chan *toolwirev1.CallResult, 1)
	go func() { joined <- results(t, te.run(t, one(keyed("j", "bump", `{"n":3,"wait":true}`, "k3"))))["j"] }()
	close(c.gate)
	ran, j := <-running, <-joined
	if ran.GetIsError() || !j.GetReplayed() || c.count(3) != 1 {
		t.Errorf("a call sent again while it ran: %v %q (replayed %v), runs %d; want its result, run once", j.GetErrorKind(), text(j), j.GetReplayed(), c.count(3))
	}
	for _, tc := range []struct{ name, key, args string }{
		{"other arguments under the key", "k1", `{"n":2}`},
		{"a key never used", "k2", `{"n":2}`},
		{"no key", "", `{"n":1}`},
	} {
		r := results(t, te.run(t, one(keyed("c", "bump", tc.args, tc.key))))["c"]
		if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS || r.GetReplayed() {
			t.Errorf("%s: %v %q; want INVALID_ARGUMENTS", tc.name, r.GetErrorKind(), text(r))
		}
	}
	// The key looked at stays free: valid arguments under it run.
	r := results(t, te.run(t, one(keyed("d", "bump", `{"n":2,"m":1}`, "k2"))))["d"]
	if r.GetIsError() || r.GetReplayed() || c.count(2) != 1 {
		t.Errorf("k2 after its refused use: %v %q, runs %d; want it run once", r.GetErrorKind(), text(r), c.count(2))
	}
	if n := c.count(1); n != 1 {
		t.Errorf("the first call ran %d times, want 1", n)
	}
}
