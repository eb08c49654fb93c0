package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// memOut is an output a test reads, which can fail or hang on demand.
type memOut struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	fail    error
	hang    chan struct{} // non-nil: Write waits until closed
	stuck   chan struct{} // closed when a Write first waits on hang
	stuckMu sync.Once
	synced  int // the length of buf at the last Sync
	closed  bool
}

func (m *memOut) Write(p []byte) (int, error) {
	m.mu.Lock()
	hang, fail := m.hang, m.fail
	m.mu.Unlock()
	if hang != nil {
		m.stuckMu.Do(func() { close(m.stuck) })
		<-hang
	}
	if fail != nil {
		return 0, fail
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf.Write(p)
}

func (m *memOut) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *memOut) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Sync notes how much of the output is synced.
func (m *memOut) Sync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.synced = m.buf.Len()
	return nil
}

func (m *memOut) lines(t *testing.T) []Line {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Line
	sc := bufio.NewScanner(bytes.NewReader(m.buf.Bytes()))
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a line is not JSON: %s (%v)", sc.Bytes(), err)
		}
		out = append(out, l)
	}
	return out
}

// testEngine runs an engine over the diag tools and extra with trail as
// observer and the policy "no-secret-echo".
func testEngine(t *testing.T, trail *Trail, extra ...tools.Tool) (*engine.Engine, *tools.Registry) {
	t.Helper()
	store := tools.Tool{Name: "store", Description: "keeps any object", InputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text("kept"), nil }}
	reg, err := tools.NewRegistry(append(append(diag.Tools(), store), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile([]policy.Rule{{Name: "no-secret-echo", Effect: policy.Deny, Message: "do not echo that", When: `tool.name == "echo" && args.text == "nope"`}})
	if err != nil {
		t.Fatal(err)
	}
	var live policy.Live
	live.Swap(set)
	// Everyone may call every tool but "fail".
	rules, err := policy.New(policy.Permissions{"*": {Deny: []string{"fail"}}}, &live, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler), Observer: trail, Admission: rules})
	t.Cleanup(e.Close)
	return e, reg
}

func run(t *testing.T, e *engine.Engine, reg *tools.Registry, caller string, calls ...*toolwirev1.ToolCall) map[string]*toolwirev1.CallResult {
	t.Helper()
	out := map[string]*toolwirev1.CallResult{}
	err := e.Run(engine.WithIdentity(context.Background(), &engine.Identity{ID: caller, Method: engine.MethodToken}), reg.Snapshot(),
		&toolwirev1.ExecuteBatchRequest{Calls: calls, SessionId: "s1"},
		engine.SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
			if r := ev.GetResult(); r != nil {
				out[r.GetCallId()] = r
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tc(id, name, args string) *toolwirev1.ToolCall {
	return &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: args}
}

// TestOneLinePerCall: a batch of mixed outcomes writes exactly one line
// per call, with the caller, IDs, tool and source, the hash of the
// canonical arguments, the decision and rule, the outcome, the duration
// and replays; no argument is recorded unless configured, and then the
// secret fields are redacted.
func TestOneLinePerCall(t *testing.T) {
	t.Parallel()
	out := &memOut{}
	trail := start(Config{Log: "mem", Arguments: true, Redact: []string{"card"}}, out, slog.New(slog.DiscardHandler), 64, queueBytes)
	e, reg := testEngine(t, trail)
	run(t, e, reg, "alice",
		tc("ok", "store", `{"text":"hi","password":"hunter2","nested":{"card":"4111","token":"tok-123"}}`),
		tc("denied", "echo", `{"text":"nope"}`),
		tc("forbidden", "fail", `{"message":"x"}`),
		tc("unknown", "nosuch", `{}`),
		tc("invalid", "sleep", `{"ms":"x"}`))
	replay := tc("keyed", "echo", `{"text":"again"}`)
	replay.IdempotencyKey = "k1"
	run(t, e, reg, "alice", replay)
	run(t, e, reg, "alice", replay)
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	lines := out.lines(t)
	if len(lines) != 7 {
		t.Fatalf("%d lines for 7 calls:\n%s", len(lines), out.buf.String())
	}
	by := map[string][]Line{}
	for _, l := range lines {
		by[l.CallID] = append(by[l.CallID], l)
		if l.Caller != "alice" || l.AuthMethod != "token" || l.BatchID == "" || l.Time.IsZero() || len(l.ArgsSHA256) != 64 || l.SessionID != "s1" {
			t.Errorf("line lacks its fields: %+v", l)
		}
	}
	ok := by["ok"][0]
	if ok.Tool != "store" || ok.Source != "builtin" || ok.Decision != "allow" || ok.Outcome != "ok" || ok.DurationMS == nil || *ok.DurationMS <= 0 || ok.Stage != StageOutcome {
		t.Errorf("ok: %+v", ok)
	}
	for _, secret := range []string{"hunter2", "4111", "tok-123"} {
		if strings.Contains(out.buf.String(), secret) {
			t.Errorf("the trail holds the secret %q:\n%s", secret, out.buf.String())
		}
	}
	if !strings.Contains(string(ok.Arguments), `"text":"hi"`) || !strings.Contains(string(ok.Arguments), `"card":"[redacted]"`) {
		t.Errorf("arguments %s; want them with card redacted", ok.Arguments)
	}
	if d := by["denied"][0]; d.Decision != "deny" || d.Rule != "no-secret-echo" || d.Outcome != "not_permitted" {
		t.Errorf("denied by policy: %+v", d)
	}
	if f := by["forbidden"][0]; f.Decision != "deny" || f.Rule != "" || f.Outcome != "not_permitted" {
		t.Errorf("denied by permissions: %+v", f)
	}
	if u := by["unknown"][0]; u.Outcome != "unknown_tool" || u.Source != "unknown" {
		t.Errorf("unknown tool: %+v", u)
	}
	if i := by["invalid"][0]; i.Outcome != "invalid_arguments" {
		t.Errorf("invalid arguments: %+v", i)
	}
	if k := by["keyed"]; len(k) != 2 || k[0].Replayed || !k[1].Replayed || k[0].ArgsSHA256 != k[1].ArgsSHA256 {
		t.Errorf("a replayed call: %+v", k)
	}
}

// TestCanonicalHash: the same arguments, spelt differently, hash the same;
// other arguments do not; nothing is recorded without audit_arguments.
func TestCanonicalHash(t *testing.T) {
	t.Parallel()
	out := &memOut{}
	trail := start(Config{Log: "mem"}, out, slog.New(slog.DiscardHandler), 64, queueBytes)
	e, reg := testEngine(t, trail)
	run(t, e, reg, "bob", tc("a", "store", `{"text":"x","z":1}`), tc("b", "store", "{ \"z\" : 1 ,\n \"text\":\"x\"}"), tc("c", "store", `{"text":"y","z":1}`))
	trail.Close()
	h := map[string]string{}
	for _, x := range out.lines(t) {
		h[x.CallID] = x.ArgsSHA256
		if x.Arguments != nil {
			t.Errorf("arguments recorded without audit_arguments: %s", x.Arguments)
		}
	}
	if h["a"] == "" || h["a"] != h["b"] || h["a"] == h["c"] {
		t.Errorf("hashes a %s, b %s (same arguments, keys and spaces otherwise), c %s (other arguments)", h["a"], h["b"], h["c"])
	}
}

// TestUnwritableTrail: a write that fails is reported (Healthy false, the
// count, a log line); with audit_required calls are refused while it
// lasts, not run, and run again as soon as their entries can be written.
func TestUnwritableTrail(t *testing.T) {
	t.Parallel()
	out := &memOut{fail: errors.New("no space left on device")}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	trail := start(Config{Log: "mem", Required: true}, out, log, 64, queueBytes)
	defer trail.Close()
	rt := &ranTool{}
	e, reg := testEngine(t, trail, rt.tool())
	for _, id := range []string{"a", "b"} {
		if r := run(t, e, reg, "alice", tc(id, "ran", `{}`))[id]; !refusedForAudit(r) || !strings.Contains(r.GetContent()[0].GetText().GetText(), "no space left on device") {
			t.Errorf("a call while the trail cannot be written, audit_required: %v", r)
		}
	}
	if len(rt.ran()) != 0 {
		t.Errorf("calls ran unrecorded: %v", rt.ran())
	}
	if _, _, failed := trail.Stats(); failed == 0 || trail.Healthy() {
		t.Errorf("the failed writes were not counted (%d), or the trail is healthy (%v)", failed, trail.Healthy())
	}
	mu.Lock()
	if !strings.Contains(logs.String(), "the audit trail cannot be written") || !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("no log line says so:\n%s", logs.String())
	}
	mu.Unlock()
	out.mu.Lock()
	out.fail = nil
	out.mu.Unlock()
	if r := run(t, e, reg, "alice", tc("c", "ran", `{}`))["c"]; r.GetIsError() || !trail.Healthy() {
		t.Errorf("a call once the trail can be written again: %v (healthy %v)", r, trail.Healthy())
	}
}

// TestStuckWriter: with the writer stuck, a call's end waits at most the
// enqueue bound, and its line is dropped and counted.
func TestStuckWriter(t *testing.T) {
	t.Parallel()
	out := &memOut{hang: make(chan struct{}), stuck: make(chan struct{})}
	trail := start(Config{Log: "mem"}, out, slog.New(slog.DiscardHandler), 1, queueBytes)
	e, reg := testEngine(t, trail)
	run(t, e, reg, "alice", tc("first", "echo", `{"text":"x"}`))
	<-out.stuck // the writer's flush of the first line waits on the disk
	var calls []*toolwirev1.ToolCall
	for i := range 4 {
		calls = append(calls, tc(string(rune('a'+i)), "echo", `{"text":"x"}`))
	}
	run(t, e, reg, "alice", calls...) // returns: no call waits for the disk for ever
	if _, dropped, _ := trail.Stats(); dropped == 0 {
		t.Errorf("no line was dropped with the writer stuck and a queue of one")
	}
	close(out.hang)
	trail.Close()
}

// TestStuckWriterBytes: with the writer stuck, the queue holds at most its
// bytes, however few lines those are: lines past them are dropped and
// counted, as past its count. Before the bound, 200 lines of 512 KiB
// arguments held 102 MiB behind a stuck writer, and 8,192 of 1 MiB would
// hold 8 GiB; they now hold at most queueBytes (64 MiB).
func TestStuckWriterBytes(t *testing.T) {
	t.Parallel()
	out := &memOut{hang: make(chan struct{}), stuck: make(chan struct{})}
	trail := start(Config{Log: "mem", Arguments: true}, out, slog.New(slog.DiscardHandler), 64, 1<<20)
	e, reg := testEngine(t, trail)
	run(t, e, reg, "alice", tc("first", "echo", `{"text":"x"}`))
	<-out.stuck // the writer's flush of the first line waits on the disk
	args := `{"blob":"` + strings.Repeat("y", 200<<10) + `"}`
	const calls = 20
	for i := range calls {
		run(t, e, reg, "alice", tc(fmt.Sprint(i), "store", args))
	}
	_, dropped, _ := trail.Stats()
	// 1 MiB holds four lines of 200 KiB, and the writer took one.
	if dropped < calls-6 {
		t.Errorf("%d of %d lines of 200 KiB were dropped behind a stuck writer with 1 MiB of queue; want all but about five", dropped, calls)
	}
	close(out.hang)
	trail.Close()
	out.mu.Lock()
	written := bytes.Count(out.buf.Bytes(), []byte("\n"))
	out.mu.Unlock()
	if got, want := written, 1+calls-int(dropped); got != want {
		t.Errorf("%d lines written once the writer went on, want %d (the first and those queued)", got, want)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// waitFor waits for cond to hold, failing the test just before its own
// deadline: what it waits for must happen, and a fixed bound (it was 10s)
// is one a loaded machine can outlast.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := testenv.Deadline(t)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met by the test's deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLinesAfterClose: a call that ends after the trail is closed (a
// detached batch's, an abandoned tool's) is dropped and counted, not a
// panic; Close twice is harmless.
func TestLinesAfterClose(t *testing.T) {
	t.Parallel()
	out := &memOut{}
	trail := start(Config{Log: "mem"}, out, slog.New(slog.DiscardHandler), 4, queueBytes)
	e, reg := testEngine(t, trail)
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	run(t, e, reg, "alice", tc("late", "echo", `{"text":"x"}`))
	if _, dropped, _ := trail.Stats(); dropped != 1 {
		t.Errorf("dropped %d; want the late line counted", dropped)
	}
	if err := trail.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestApprovalsNamed: a call held for approval has its outcome line say
// what the person decided and who: "approval", "approver" (as the decision
// named them) and "resolved_by" (the authenticated caller); a denied
// one's decision is "deny". Lines said "decision":"allow",
// "outcome":"denied", and named no one.
func TestApprovalsNamed(t *testing.T) {
	t.Parallel()
	out := &memOut{}
	trail := start(Config{Log: "mem"}, out, slog.New(slog.DiscardHandler), 64, queueBytes)
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := policy.New(nil, nil, []policy.ApprovalRule{{Tools: []string{"echo"}, Reason: "a person looks first"}})
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(engine.Config{Approvers: []string{"carol"}}, engine.Deps{Logger: slog.New(slog.DiscardHandler), Observer: trail, Admission: rules})
	t.Cleanup(e.Close)

	ctx := engine.WithIdentity(context.Background(), &engine.Identity{ID: "alice", Method: engine.MethodToken})
	carol := engine.WithIdentity(context.Background(), &engine.Identity{ID: "carol", Method: engine.MethodToken})
	err = e.Run(ctx, reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{tc("yes", "echo", `{"text":"a"}`), tc("no", "echo", `{"text":"b"}`), tc("plain", "sleep", `{"ms":1}`)}},
		engine.SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
			if w := ev.GetAwaitingApproval(); w != nil {
				batch := ""
				inflight, _ := e.Batches(ctx, false, 0)
				for _, b := range inflight {
					batch = b.ID
				}
				// Resolved from another goroutine, as a person's RPC would be.
				go func() {
					if err := e.ResolveApproval(carol, batch, w.GetCallId(), w.GetCallId() == "yes", "not that", "Carol C."); err != nil {
						t.Errorf("resolving %s: %v", w.GetCallId(), err)
					}
				}()
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	got := map[string]Line{}
	for _, l := range out.lines(t) {
		l.Time, l.DurationMS, l.ArgsSHA256, l.BatchID = time.Time{}, nil, "", ""
		got[l.CallID] = l
	}
	want := map[string]Line{
		"yes":   {Stage: StageOutcome, Caller: "alice", AuthMethod: "token", CallID: "yes", Tool: "echo", Source: "builtin", Decision: "allow", Outcome: "ok", Approval: "approved", Approver: "Carol C.", ResolvedBy: "carol"},
		"no":    {Stage: StageOutcome, Caller: "alice", AuthMethod: "token", CallID: "no", Index: 1, Tool: "echo", Source: "builtin", Decision: "deny", Outcome: "denied", Approval: "denied", Approver: "Carol C.", ResolvedBy: "carol"},
		"plain": {Stage: StageOutcome, Caller: "alice", AuthMethod: "token", CallID: "plain", Index: 2, Tool: "sleep", Source: "builtin", Decision: "allow", Outcome: "ok"},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Line{})); diff != "" {
		t.Errorf("audit lines (-want +got):\n%s", diff)
	}
}
