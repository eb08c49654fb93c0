package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/tools"
)

// holdWrites holds the calls of tools whose names start with "wri", as
// package policy's approval rule {tools: ["wri*"], reason: "it writes"}
// does (its own tests hold the rules to that).
var holdWrites = admit{decide: func(_ *Identity, t *tools.Tool, _ json.RawMessage) Verdict {
	if strings.HasPrefix(t.Name, "wri") {
		return Verdict{Effect: Hold, Reason: "it writes"}
	}
	return Verdict{}
}}

// awaiting waits for lb's CallAwaitingApproval and returns it.
func awaiting(t *testing.T, lb *liveBatch) *toolwirev1.CallAwaitingApproval {
	t.Helper()
	var a *toolwirev1.CallAwaitingApproval
	waitFor(t, func() bool {
		for _, ev := range lb.snapshot() {
			if a = ev.GetAwaitingApproval(); a != nil {
				return true
			}
		}
		return false
	})
	return a
}

// startHeld starts a batch of alice's whose one call waits for approval.
func startHeld(t *testing.T, te *testBed, detach bool) (*liveBatch, string) {
	t.Helper()
	lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("w", "write", `{"ms":1}`)}, Options: &toolwirev1.BatchOptions{Detach: detach}}
	go func() { lb.done <- te.e.Run(as("alice"), te.reg.Snapshot(), req, lb) }()
	a := awaiting(t, lb)
	if a.GetCallId() != "w" || a.GetToolName() != "write" || a.GetReason() != "it writes" || a.GetArguments() != `{"ms":1}` {
		t.Fatalf("CallAwaitingApproval %v", a)
	}
	return lb, batchIDOf(t, lb.snapshot())
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	cfg := Config{Approvers: []string{"carol", "alice"}}

	t.Run("approved runs", func(t *testing.T) {
		t.Parallel()
		te := newTestBedWith(t, cfg, Deps{Admission: holdWrites})
		lb, id := startHeld(t, te, false)
		if n := te.e.Stats().CallsRunning; n != 0 {
			t.Errorf("a held call holds %d slots, want 0", n)
		}
		if err := te.e.ResolveApproval(as("carol"), id, "w", true, "", "Carol"); err != nil {
			t.Fatalf("ResolveApproval: %v", err)
		}
		events, err := drain(lb)
		if err != nil {
			t.Fatal(err)
		}
		if r := results(t, events)["w"]; r.GetIsError() || text(r) != "done w" {
			t.Errorf("result %v, want the call run", r)
		}
	})

	t.Run("denied with the message", func(t *testing.T) {
		t.Parallel()
		te := newTestBedWith(t, cfg, Deps{Admission: holdWrites})
		lb, id := startHeld(t, te, false)
		if err := te.e.ResolveApproval(as("carol"), id, "w", false, "not on a Friday", "Carol"); err != nil {
			t.Fatalf("ResolveApproval: %v", err)
		}
		events, _ := drain(lb)
		r := results(t, events)["w"]
		if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_DENIED || text(r) != "not on a Friday" {
			t.Errorf("result %v, want DENIED with the message", r)
		}
		if entries := te.state.entries(); len(entries) != 0 {
			t.Errorf("the denied tool ran: %v", entries)
		}
	})

	t.Run("no answer times out", func(t *testing.T) {
		t.Parallel()
		c := cfg
		c.ApprovalTimeout = 100 * time.Millisecond
		te := newTestBedWith(t, c, Deps{Admission: holdWrites})
		lb, _ := startHeld(t, te, false)
		events, _ := drain(lb)
		r := results(t, events)["w"]
		if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT || !strings.Contains(text(r), "no one approved") {
			t.Errorf("result %v, want TIMEOUT saying no one approved", r)
		}
	})

	t.Run("permission", func(t *testing.T) {
		t.Parallel()
		te := newTestBedWith(t, cfg, Deps{Admission: holdWrites})
		lb, id := startHeld(t, te, false)
		if err := te.e.ResolveApproval(as("mallory"), id, "w", true, "", ""); CodeOf(err) != PermissionDenied {
			t.Errorf("ResolveApproval by a caller who is no approver: %v, want PermissionDenied", err)
		}
		if err := te.e.ResolveApproval(as("alice"), id, "w", true, "", ""); CodeOf(err) != PermissionDenied {
			t.Errorf("ResolveApproval of alice's own call by alice: %v, want PermissionDenied", err)
		}
		if err := te.e.ResolveApproval(as("carol"), id, "nope", true, "", ""); CodeOf(err) != NotFound {
			t.Errorf("ResolveApproval of a call not waiting: %v, want NotFound", err)
		}
		long := strings.Repeat("x", MaxIDBytes+1)
		if err := te.e.ResolveApproval(as("carol"), long, "w", true, "", ""); CodeOf(err) != InvalidArgument {
			t.Errorf("ResolveApproval of a batch ID longer than any: %v, want InvalidArgument", err)
		}
		if err := te.e.ResolveApproval(as("carol"), id, long, true, "", ""); CodeOf(err) != InvalidArgument {
			t.Errorf("ResolveApproval of a call ID longer than any: %v, want InvalidArgument", err)
		}
		if err := te.e.ResolveApproval(context.Background(), id, "w", false, "anonymous says no", ""); err != nil {
			t.Errorf("ResolveApproval by the anonymous caller (authentication off): %v", err)
		}
		events, _ := drain(lb)
		if r := results(t, events)["w"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_DENIED {
			t.Errorf("result %v, want DENIED", r)
		}
	})

	t.Run("own calls when configured", func(t *testing.T) {
		t.Parallel()
		c := cfg
		c.ApproveOwnCalls = true
		te := newTestBedWith(t, c, Deps{Admission: holdWrites})
		lb, id := startHeld(t, te, false)
		if err := te.e.ResolveApproval(as("alice"), id, "w", true, "", ""); err != nil {
			t.Fatalf("ResolveApproval of alice's own call, allowed: %v", err)
		}
		events, _ := drain(lb)
		if r := results(t, events)["w"]; r.GetIsError() {
			t.Errorf("result %v, want the call run", r)
		}
	})

	t.Run("callers and cancellation", func(t *testing.T) {
		t.Parallel()
		holdBobsWrites := admit{decide: func(caller *Identity, t *tools.Tool, _ json.RawMessage) Verdict {
			if caller.ID == "bob" && t.Name == "write" {
				return Verdict{Effect: Hold, Reason: "bob writes"}
			}
			return Verdict{}
		}}
		te := newTestBedWith(t, cfg, Deps{Admission: holdBobsWrites})
		// alice's call is not held: the rule names bob only.
		events := te.runAs(t, "alice", &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("w", "write", `{"ms":1}`)}})
		if r := results(t, events)["w"]; r.GetIsError() {
			t.Errorf("alice's call: %v, want it run without approval", r)
		}
		ctx, cancel := context.WithCancel(as("bob"))
		lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
		go func() {
			lb.done <- te.e.Run(ctx, te.reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("w", "write", `{"ms":1}`)}}, lb)
		}()
		awaiting(t, lb)
		cancel()
		if _, err := drain(lb); CodeOf(err) != Canceled {
			t.Errorf("Run after the client left: %v, want Canceled", err)
		}
	})
}

// TestApprovalFromAnotherReplica: a detached batch's call held on A is
// approved through B; GetBatch on B says AWAITING_APPROVAL meanwhile.
func TestApprovalFromAnotherReplica(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	cfg := Config{Approvers: []string{"carol"}}
	deps := Deps{Idempotency: m, Vars: m, EventLog: m, Admission: holdWrites}
	da, db := deps, deps
	da.Replica, db.Replica = "a", "b"
	a, b := newTestBedWith(t, cfg, da), newTestBedWith(t, cfg, db)
	lb, id := startHeld(t, a, true)
	got, err := b.e.GetBatch(as("alice"), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_AWAITING_APPROVAL {
		t.Errorf("GetBatch on B: %v, want AWAITING_APPROVAL", got.GetState())
	}
	if err := b.e.ResolveApproval(as("mallory"), id, "w", true, "", ""); CodeOf(err) != PermissionDenied {
		t.Errorf("ResolveApproval on B by no approver: %v, want PermissionDenied", err)
	}
	if err := b.e.ResolveApproval(as("alice"), id, "w", true, "", ""); CodeOf(err) != PermissionDenied {
		t.Errorf("ResolveApproval on B by alice of her own call: %v, want PermissionDenied", err)
	}
	if err := b.e.ResolveApproval(as("carol"), id, "w", true, "ok", "Carol"); err != nil {
		t.Fatalf("ResolveApproval on B: %v", err)
	}
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	if r := results(t, events)["w"]; r.GetIsError() {
		t.Errorf("result %v, want the call run", r)
	}
	got, err = b.e.GetBatch(as("alice"), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_FINISHED {
		t.Errorf("GetBatch on B after: %v, want FINISHED", got.GetState())
	}
}

// TestApprovalResolvedOnceAcrossReplicas: a call held on A is denied
// through B, then approved through B and through A before A has looked:
// each approval is NotFound (resolved already) and the denial stands,
// where the approval used to replace it unseen, both answered OK.
func TestApprovalResolvedOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	cfg := Config{Approvers: []string{"carol", "dave"}}
	deps := Deps{Idempotency: m, Vars: m, EventLog: m, Admission: holdWrites}
	da, db := deps, deps
	da.Replica, db.Replica = "a", "b"
	a, b := newTestBedWith(t, cfg, da), newTestBedWith(t, cfg, db)
	lb, id := startHeld(t, a, false)
	if err := b.e.ResolveApproval(as("carol"), id, "w", false, "not this one", ""); err != nil {
		t.Fatalf("the denial through B: %v", err)
	}
	for name, te := range map[string]*testBed{"B": b, "A": a} {
		err := te.e.ResolveApproval(as("dave"), id, "w", true, "", "")
		// NotFound: resolved already, or (A having looked meanwhile) the
		// call waits no more.
		if CodeOf(err) != NotFound {
			t.Errorf("an approval through %s after the denial: %v; want NotFound", name, err)
		}
	}
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	if r := results(t, events)["w"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_DENIED || text(r) != "not this one" {
		t.Errorf("result %v; want DENIED, as decided first", r)
	}
}

// slowVars is a store whose variables take a while to answer, as a
// shared store across a network does: two deciders then look at the
// mailbox, and write to it, at the same time.
type slowVars struct{ *memory.Store }

func (s slowVars) GetVar(ctx context.Context, scope, name string) ([]byte, bool, error) {
	time.Sleep(5 * time.Millisecond)
	return s.Store.GetVar(ctx, scope, name)
}

func (s slowVars) SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error {
	time.Sleep(5 * time.Millisecond)
	return s.Store.SetVar(ctx, scope, name, value, ttl)
}

func (s slowVars) AddVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) (bool, error) {
	time.Sleep(5 * time.Millisecond)
	return s.Store.AddVar(ctx, scope, name, value, ttl)
}

// TestConcurrentDecisionsOneStands: three people decide one held call at
// the same moment, through the owner A and through B and C: one is told
// its decision was taken, the others that it was resolved already, and
// the call ends as the one told decided. Each used to be told OK while
// only one decision was taken.
func TestConcurrentDecisionsOneStands(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	st := slowVars{m}
	cfg := Config{Approvers: []string{"carol", "dave", "erin"}}
	deps := Deps{Idempotency: m, Vars: st, EventLog: m, Admission: holdWrites}
	da, db, dc := deps, deps, deps
	da.Replica, db.Replica, dc.Replica = "a", "b", "c"
	a, b, c := newTestBedWith(t, cfg, da), newTestBedWith(t, cfg, db), newTestBedWith(t, cfg, dc)
	for round := range 10 {
		lb, id := startHeld(t, a, true)
		deciders := []struct {
			te      *testBed
			who     string
			approve bool
		}{{a, "carol", false}, {b, "dave", true}, {c, "erin", false}}
		errs := make([]error, len(deciders))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, d := range deciders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = d.te.e.ResolveApproval(as(d.who), id, "w", d.approve, "by "+d.who, "")
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("round %d: %s and %s were both told their decision was taken", round, deciders[winner].who, deciders[i].who)
			case err == nil:
				winner = i
			case CodeOf(err) != NotFound:
				t.Errorf("round %d: %s: %v; want OK or NotFound", round, deciders[i].who, err)
			}
		}
		events, err := drain(lb)
		if err != nil {
			t.Fatal(err)
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody's decision was taken: %v", round, errs)
		}
		r := results(t, events)["w"]
		if w := deciders[winner]; w.approve == r.GetIsError() || (!w.approve && text(r) != "by "+w.who) {
			t.Errorf("round %d: %s's decision was taken, but the call ended %v %q", round, w.who, r.GetErrorKind(), text(r))
		}
	}
}

// TestToolAsksForApproval: a tool asks at run time through its Call; it
// holds no slot while it waits, runs on once approved, and its result says
// DENIED with the message when denied.
func TestToolAsksForApproval(t *testing.T) {
	t.Parallel()
	asker := tools.Tool{Name: "asker", Description: "asks for approval", Handler: func(ctx context.Context, c *tools.Call) (*tools.Result, error) {
		if err := c.RequestApproval(ctx, "rm -rf is outside the allow-list"); err != nil {
			return nil, err
		}
		return tools.Text("ran"), nil
	}}
	te := newTestBed(t, Config{Approvers: []string{"carol"}}, asker)
	for _, approve := range []bool{true, false} {
		lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
		go func() {
			lb.done <- te.e.Run(as("alice"), te.reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("x", "asker", "")}}, lb)
		}()
		a := awaiting(t, lb)
		if a.GetReason() != "rm -rf is outside the allow-list" {
			t.Errorf("CallAwaitingApproval %v", a)
		}
		if n := te.e.Stats().CallsRunning; n != 0 {
			t.Errorf("a tool waiting for approval holds %d slots, want 0", n)
		}
		if err := te.e.ResolveApproval(as("carol"), batchIDOf(t, lb.snapshot()), "x", approve, "no deletions today", ""); err != nil {
			t.Fatal(err)
		}
		events, err := drain(lb)
		if err != nil {
			t.Fatal(err)
		}
		r := results(t, events)["x"]
		switch {
		case approve && (r.GetIsError() || text(r) != "ran"):
			t.Errorf("approved: %v, want the tool to run on", r)
		case !approve && (r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_DENIED || text(r) != "no deletions today"):
			t.Errorf("denied: %v, want DENIED with the message", r)
		}
	}
}

// TestToolAsksTwice: a tool that asks twice in one call is asked twice,
// through its own replica or another: the mark the first wait leaves in
// the mailbox (so that a late decider is told it waits no more) is no
// answer to the second.
func TestToolAsksTwice(t *testing.T) {
	t.Parallel()
	asker := tools.Tool{Name: "asker", Description: "asks twice", Handler: func(ctx context.Context, c *tools.Call) (*tools.Result, error) {
		for _, why := range []string{"first", "second"} {
			if err := c.RequestApproval(ctx, why); err != nil {
				return nil, err
			}
		}
		return tools.Text("ran"), nil
	}}
	m := memory.New(memory.Options{})
	cfg := Config{Approvers: []string{"carol"}}
	deps := Deps{Idempotency: m, Vars: m, EventLog: m}
	da, db := deps, deps
	da.Replica, db.Replica = "a", "b"
	a, b := newTestBedWith(t, cfg, da, asker), newTestBedWith(t, cfg, db, asker)
	for name, through := range map[string]*testBed{"its own replica": a, "another replica": b} {
		lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
		go func() {
			lb.done <- a.e.Run(as("alice"), a.reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("x", "asker", "")}}, lb)
		}()
		for _, why := range []string{"first", "second"} {
			waitFor(t, func() bool {
				for _, ev := range lb.snapshot() {
					if w := ev.GetAwaitingApproval(); w != nil && w.GetReason() == why {
						return true
					}
				}
				return false
			})
			if err := through.e.ResolveApproval(as("carol"), batchIDOf(t, lb.snapshot()), "x", true, "", ""); err != nil {
				t.Fatalf("%s, the %s ask: %v", name, why, err)
			}
		}
		events, err := drain(lb)
		if err != nil {
			t.Fatal(err)
		}
		if r := results(t, events)["x"]; r.GetIsError() || text(r) != "ran" {
			t.Errorf("%s: %v, want the tool to run on after both", name, r)
		}
	}
}

// TestDeniedAtRunTimeIsAskedAgain: a keyed call whose tool asked for
// approval and was denied does not keep its key: sent again with the same
// key, it asks again (as a call an approval rule holds does, which takes
// no key until approved), rather than replaying the denial for the key's
// TTL.
func TestDeniedAtRunTimeIsAskedAgain(t *testing.T) {
	t.Parallel()
	asker := tools.Tool{Name: "asker", Description: "asks for approval", Handler: func(ctx context.Context, c *tools.Call) (*tools.Result, error) {
		if err := c.RequestApproval(ctx, "outside the allow-list"); err != nil {
			return nil, err
		}
		return tools.Text("ran"), nil
	}}
	te := newTestBed(t, Config{Approvers: []string{"carol"}}, asker)
	for i, approve := range []bool{false, true} {
		lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
		keyed := call("x", "asker", "")
		keyed.IdempotencyKey = "k"
		go func() {
			lb.done <- te.e.Run(as("alice"), te.reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{keyed}}, lb)
		}()
		var asked bool
		waitFor(t, func() bool {
			for _, ev := range lb.snapshot() {
				asked = asked || ev.GetAwaitingApproval() != nil
				if asked || ev.GetResult() != nil {
					return true
				}
			}
			return false
		})
		if !asked {
			events, _ := drain(lb)
			t.Fatalf("send %d: the call did not ask for approval: %v", i+1, results(t, events)["x"])
		}
		if err := te.e.ResolveApproval(as("carol"), batchIDOf(t, lb.snapshot()), "x", approve, "not now", ""); err != nil {
			t.Fatal(err)
		}
		events, err := drain(lb)
		if err != nil {
			t.Fatal(err)
		}
		r := results(t, events)["x"]
		switch {
		case !approve && r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_DENIED:
			t.Errorf("denied: %v, want DENIED", r)
		case approve && (r.GetIsError() || r.GetReplayed() || text(r) != "ran"):
			t.Errorf("approved on the second send: %v, want the tool run", r)
		}
	}
}

// TestCallIDsDoNotCrossMailboxes: a held call's announcement and another
// call's decision share the approval mailbox's names (a call "w" has its
// decision under "decision:w"), so a batch whose call IDs are "w" and
// "decision:w" must not have one read as the other. Here alice, an
// approver who may not approve her own calls, resolves her call
// "decision:w" through B after carol approved "w" there: the decision left
// for "w" read as "decision:w"'s announcement named no caller, and her
// approval went through.
func TestCallIDsDoNotCrossMailboxes(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	cfg := Config{Approvers: []string{"alice", "carol"}}
	holdReads := admit{decide: func(_ *Identity, t *tools.Tool, _ json.RawMessage) Verdict {
		if t.Name == "read" {
			return Verdict{Effect: Hold, Reason: "it reads"}
		}
		return Verdict{}
	}}
	deps := Deps{Idempotency: m, Vars: m, EventLog: m, Admission: holdReads}
	da, db := deps, deps
	da.Replica, db.Replica = "a", "b"
	a, b := newTestBedWith(t, cfg, da), newTestBedWith(t, cfg, db)
	lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		lb.done <- a.e.Run(as("alice"), a.reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
			call("w", "read", `{"ms":1}`), call("decision:w", "read", `{"ms":1}`),
		}}, lb)
	}()
	waitFor(t, func() bool {
		n := 0
		for _, ev := range lb.snapshot() {
			if ev.GetAwaitingApproval() != nil {
				n++
			}
		}
		return n == 2
	})
	id := batchIDOf(t, lb.snapshot())
	if err := b.e.ResolveApproval(as("carol"), id, "w", true, "", ""); err != nil {
		t.Fatalf("carol approving w through B: %v", err)
	}
	if err := b.e.ResolveApproval(as("alice"), id, "decision:w", true, "", ""); err == nil {
		t.Errorf("alice approving her own call decision:w through B: allowed")
	}
	if err := a.e.ResolveApproval(as("carol"), id, "decision:w", true, "", ""); err != nil {
		t.Fatalf("carol approving decision:w on A: %v", err)
	}
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	for id, r := range results(t, events) {
		if r.GetIsError() {
			t.Errorf("call %s: %v; want it run, as carol approved it", id, r)
		}
	}
}

// TestApprovalLinesNameTheCallOnce: the "call waits for approval" and
// "approval resolved" lines carry batch_id, call_id and tool once each,
// from the call's context (LogHandler). They also passed them as
// attributes, so each JSON line had "batch_id" and "call_id" twice: a
// member name twice is a JSON object some parsers refuse.
func TestApprovalLinesNameTheCallOnce(t *testing.T) {
	t.Parallel()
	var logged logbuf.Buffer
	te := newTestBedWith(t, Config{Approvers: []string{"carol"}}, Deps{Admission: holdWrites, Logger: slog.New(slog.NewJSONHandler(&logged, nil))})
	lb, id := startHeld(t, te, false)
	if err := te.e.ResolveApproval(as("carol"), id, "w", true, "", "Carol"); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(lb); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for line := range strings.SplitSeq(strings.TrimSpace(logged.String()), "\n") {
		if !strings.Contains(line, "approval") {
			continue
		}
		seen++
		for _, key := range []string{`"batch_id":`, `"call_id":`, `"tool":`} {
			if n := strings.Count(line, key); n != 1 {
				t.Errorf("%s %d times in %s", key, n, line)
			}
		}
		if !strings.Contains(line, `"batch_id":"`+id+`"`) || !strings.Contains(line, `"call_id":"w"`) {
			t.Errorf("the line does not name the call: %s", line)
		}
	}
	if seen != 2 {
		t.Errorf("%d approval lines; want 2:\n%s", seen, logged.String())
	}
}

// severed is a replica's store that can be cut off, as a replica that
// dies is from the store's view: once cut, every write and read of its
// variables and logs fails, so nothing it held is renewed.
type severed struct {
	store.Store
	cut atomic.Bool
}

var errSevered = errors.New("severed from the store")

func (s *severed) GetVar(ctx context.Context, scope, name string) ([]byte, bool, error) {
	if s.cut.Load() {
		return nil, false, errSevered
	}
	return s.Store.GetVar(ctx, scope, name)
}

func (s *severed) SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error {
	if s.cut.Load() {
		return errSevered
	}
	return s.Store.SetVar(ctx, scope, name, value, ttl)
}

func (s *severed) RenewLog(ctx context.Context, name, owner string, lease time.Duration) error {
	if s.cut.Load() {
		return errSevered
	}
	return s.Store.RenewLog(ctx, name, owner, lease)
}

func (s *severed) Append(ctx context.Context, name, owner string, data ...[]byte) (uint64, error) {
	if s.cut.Load() {
		return 0, errSevered
	}
	return s.Store.Append(ctx, name, owner, data...)
}

// TestApprovalOfALostReplicasCall: the replica holding a call for
// approval is lost (cut off from the store) and the batch's lease and the
// call's announcement run out. An approval sent through another replica
// is NotFound, for a detached batch and for a plain one, where it used to
// be answered OK and left in the store for a call no one would run (the
// announcement lived the approval timeout and a minute more).
func TestApprovalOfALostReplicasCall(t *testing.T) {
	for _, detach := range []bool{true, false} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			sa, sb := &severed{Store: openRedis(t, srv)}, openRedis(t, srv)
			cfg := Config{Approvers: []string{"carol"}, BatchLease: time.Second, ApprovalTimeout: 10 * time.Minute}
			a := newTestBedWith(t, cfg, Deps{Idempotency: sa, Vars: sa, EventLog: sa, Signals: sa, Admission: holdWrites, Replica: "a"})
			b := newTestBedWith(t, cfg, Deps{Idempotency: sb, Vars: sb, EventLog: sb, Signals: sb, Admission: holdWrites, Replica: "b"})
			lb, id := startHeld(t, a, detach)
			sa.cut.Store(true)
			// Past the batch's lease (1 s) and the announcement's (3 s).
			time.Sleep(4 * time.Second)
			if err := b.e.ResolveApproval(as("carol"), id, "w", true, "", ""); CodeOf(err) != NotFound {
				t.Errorf("an approval through B of a call its lost replica held: %v; want NotFound", err)
			}
			if err := a.e.Cancel(as("alice"), id, "the test is over"); err != nil {
				t.Fatal(err)
			}
			drain(lb)
		})
	}
}

// announceFails is a store whose first announcement of a held call fails:
// refused, or, with landed, stored but answered with an error (a reply
// lost on its way back).
type announceFails struct {
	store.Vars
	landed bool
	failed atomic.Bool
}

func (f *announceFails) SetVar(ctx context.Context, scope, name string, value []byte, ttl time.Duration) error {
	if strings.HasPrefix(scope, "approval:") && name == "w" && f.failed.CompareAndSwap(false, true) {
		if f.landed {
			_ = f.Vars.SetVar(ctx, scope, name, value, ttl)
		}
		return errors.New("the store did not answer")
	}
	return f.Vars.SetVar(ctx, scope, name, value, ttl)
}

// TestApprovalAnnouncedAfterAStoreBlip: a held call whose announcement
// the store did not take is announced again at the next tick, so another
// replica can resolve it; it was tried again only a third of a lease later
// (3.3 s by default; with this test's 24 h lease, never in its time). An
// announcement that failed but landed is not preceded by fresh again, so
// the decision another replica left meanwhile stands.
func TestApprovalAnnouncedAfterAStoreBlip(t *testing.T) {
	t.Parallel()
	for _, landed := range []bool{false, true} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			t.Parallel()
			m := memory.New(memory.Options{})
			cfg := Config{Approvers: []string{"carol"}, BatchLease: 24 * time.Hour}
			fa := &announceFails{Vars: m, landed: landed}
			a := newTestBedWith(t, cfg, Deps{Idempotency: m, Vars: fa, EventLog: m, Admission: holdWrites, Replica: "a"})
			b := newTestBedWith(t, cfg, Deps{Idempotency: m, Vars: m, EventLog: m, Admission: holdWrites, Replica: "b"})
			lb, id := startHeld(t, a, false)
			if !fa.failed.Load() {
				t.Fatal("the first announcement did not fail")
			}
			waitFor(t, func() bool {
				err := b.e.ResolveApproval(as("carol"), id, "w", true, "", "Carol")
				if err != nil && CodeOf(err) != NotFound {
					t.Fatalf("ResolveApproval on B: %v", err)
				}
				return err == nil
			})
			events, err := drain(lb)
			if err != nil {
				t.Fatal(err)
			}
			if r := results(t, events)["w"]; r.GetIsError() || text(r) != "done w" {
				t.Errorf("result %v; want the call approved through B and run", r)
			}
		})
	}
}

// TestApprovalOfAnOldVersionsLostCall: in a rolling upgrade, a replica of
// a version before announcements said whether their batch was detached
// (nor renewed them) held a detached batch's call, and died. Its
// announcement, as such a version wrote it, lives the call's wait and a
// minute more. An approval through this version is NotFound once the
// batch's log is finished (taken over: owner lost) or its lease has run
// out, where it was answered OK for a call no one would run (two real
// replicas, each old version: "approved call a"). The announcement of a
// plain batch, which has no log, and of a batch whose replica still holds
// it are approved as before.
func TestApprovalOfAnOldVersionsLostCall(t *testing.T) {
	t.Parallel()
	// {"caller","tool"}: what versions before the flag announced.
	const oldAnnouncement = `{"caller":"alice","tool":"write"}`
	for _, tc := range []struct {
		name string
		log  func(t *testing.T, m *memory.Store, log string) // the old replica's batch log, as it left it
		want Code
	}{
		{"owner lost", func(t *testing.T, m *memory.Store, log string) {
			ctx := context.Background()
			if err := m.Open(ctx, log, "old", time.Millisecond, time.Hour); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return m.TakeOver(ctx, log, "new", time.Minute) == nil })
			if err := m.Finish(ctx, log, "new", time.Hour); err != nil {
				t.Fatal(err)
			}
		}, NotFound},
		{"lease run out", func(t *testing.T, m *memory.Store, log string) {
			ctx := context.Background()
			if err := m.Open(ctx, log, "old", time.Millisecond, time.Hour); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { info, err := m.Stat(ctx, log); return err == nil && !info.Owned })
		}, NotFound},
		{"owned", func(t *testing.T, m *memory.Store, log string) {
			if err := m.Open(context.Background(), log, "old", time.Hour, time.Hour); err != nil {
				t.Fatal(err)
			}
		}, OK},
		{"plain batch", func(*testing.T, *memory.Store, string) {}, OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m := memory.New(memory.Options{})
			t.Cleanup(func() { m.Close() })
			te := newTestBedWith(t, Config{Approvers: []string{"carol"}}, Deps{Idempotency: m, Vars: m, EventLog: m, Admission: holdWrites})
			tc.log(t, m, logName("alice", "b1"))
			if err := m.SetVar(ctx, approvalScope("b1"), "w", []byte(oldAnnouncement), time.Hour); err != nil {
				t.Fatal(err)
			}
			err := te.e.ResolveApproval(as("carol"), "b1", "w", true, "", "")
			if CodeOf(err) != tc.want {
				t.Errorf("an approval of an old version's announcement: %v; want %v", err, tc.want)
			}
			_, left, _ := approvalMail{m}.decision(ctx, "b1", "w")
			if left != (tc.want == OK) {
				t.Errorf("a decision left in the store: %v; want %v", left, tc.want == OK)
			}
		})
	}
}

// TestHeldKeyedCallTakesNoKeyUntilApproved: a keyed call an approval rule
// holds takes no idempotency key while it waits; approved, it runs and is
// recorded; sent again with the key, it is asked for approval again (the
// path asks before idempotency), then replayed, not run twice
// (docs/batches.md, Approvals).
func TestHeldKeyedCallTakesNoKeyUntilApproved(t *testing.T) {
	t.Parallel()
	idem := memory.New(memory.Options{})
	t.Cleanup(func() { idem.Close() })
	te := newTestBedWith(t, Config{Approvers: []string{"carol"}}, Deps{Admission: holdWrites, Idempotency: idem})
	for i := range 2 {
		lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
		req := one(keyed(fmt.Sprint("w", i), "write", `{"ms":1}`, "k"))
		go func() { lb.done <- te.e.Run(as("alice"), te.reg.Snapshot(), req, lb) }()
		var asked bool
		waitFor(t, func() bool {
			for _, ev := range lb.snapshot() {
				asked = asked || ev.GetAwaitingApproval() != nil
				if asked || ev.GetResult() != nil {
					return true
				}
			}
			return false
		})
		if !asked {
			events, _ := drain(lb)
			t.Fatalf("send %d was not asked for approval: %v", i+1, results(t, events)[fmt.Sprint("w", i)])
		}
		if i == 0 && idem.Len() != 0 {
			t.Errorf("a held call left %d entries in the idempotency store, want none", idem.Len())
		}
		if err := te.e.ResolveApproval(as("carol"), batchIDOf(t, lb.snapshot()), fmt.Sprint("w", i), true, "", ""); err != nil {
			t.Fatalf("send %d: ResolveApproval: %v", i+1, err)
		}
		events, err := drain(lb)
		if err != nil {
			t.Fatal(err)
		}
		if r := results(t, events)[fmt.Sprint("w", i)]; r.GetIsError() || r.GetReplayed() != (i == 1) {
			t.Errorf("send %d: %v; want it run the first time, replayed the second", i+1, r)
		}
	}
	if got := te.state.entries(); len(got) != 2 {
		t.Errorf("the tool's runs: %v; want one (start and end)", got)
	}
}
