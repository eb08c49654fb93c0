package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// approvalsConfig holds calls of echo for approval.
const approvalsConfig = `approvals:
  - tools: ["echo"]
    reason: "echo needs a nod"
`

// startDetached sends req (detached) to addr and reads its events until
// stop says so, then drops the stream, as a client that goes away does. It
// returns the events read.
func startDetached(t *testing.T, addr string, req *toolwirev1.ExecuteBatchRequest, stop func(*toolwirev1.ExecuteBatchResponse) bool) []*toolwirev1.ExecuteBatchResponse {
	t.Helper()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if req.Options == nil {
		req.Options = &toolwirev1.BatchOptions{}
	}
	req.Options.Detach = true
	var evs []*toolwirev1.ExecuteBatchResponse
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	for ev, err := range c.ExecuteBatch(ctx, req) {
		if err != nil {
			t.Fatalf("ExecuteBatch: %v", err)
		}
		evs = append(evs, ev)
		if stop(ev) {
			break // the client goes away
		}
	}
	return evs
}

func isAwaiting(ev *toolwirev1.ExecuteBatchResponse) bool { return ev.GetAwaitingApproval() != nil }

// TestDetachedBatchCommands: the client leaves a detached batch whose call
// waits for approval; "toolwire approve --deny" and "toolwire attach" finish
// it, and "toolwire cancel" finds it ended.
func TestDetachedBatchCommands(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag", "--config", writeFile(t, "toolwire.yaml", approvalsConfig))
	evs := startDetached(t, s.addr, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("s", "sleep", map[string]int{"ms": 10}),
		client.Call("e", "echo", map[string]string{"text": "held"}),
	}}, isAwaiting)
	id := evs[0].GetAccepted().GetBatchId()

	got := runCmd(t, s.addr, "approve", "--deny", "--message", "not today", id, "e")
	if got.code != 0 || !strings.Contains(got.stdout, "denied call e of batch "+id) {
		t.Fatalf("approve --deny: %d %v\n%s%s", got.code, got.err, got.stdout, got.stderr)
	}
	got = runCmd(t, s.addr, "attach", "--after-seq", "1", id)
	if got.code != 1 { // a call failed (denied)
		t.Fatalf("attach: exit %d (%v), want 1\n%s", got.code, got.err, got.stderr)
	}
	out := events(t, got.stdout)
	if out[0].GetSeq() != 2 || out[len(out)-1].GetFinished() == nil {
		t.Fatalf("attach printed %d events from seq %d; want from 2 to BatchFinished\n%s\n%s", len(out), out[0].GetSeq(), got.stdout, got.stderr)
	}
	res := results(out)
	slices.Sort(res)
	if !slices.Equal(res, []string{"e:DENIED", "s:UNSPECIFIED"}) {
		t.Errorf("results %v, want e DENIED, s run", res)
	}
	for _, ev := range out {
		if r := ev.GetResult(); r.GetCallId() == "e" && r.GetContent()[0].GetText().GetText() != "not today" {
			t.Errorf("the denied call's text %q, want the message", r.GetContent()[0].GetText().GetText())
		}
	}
	if got := runCmd(t, s.addr, "cancel", id); got.code != 1 || status.Code(errors.Unwrap(got.err)) != codes.NotFound && !strings.Contains(fmt.Sprint(got.err), "NotFound") {
		t.Errorf("cancel of an ended batch: exit %d, %v; want a NotFound failure", got.code, got.err)
	}
	if got := runCmd(t, s.addr, "attach", "nope"); got.code != 1 {
		t.Errorf("attach of no batch: exit %d, want 1", got.code)
	}
}

// replica is a "toolwire serve" child process on the shared Redis. Its
// batch lease is 5s: a live replica renews it every 500ms, and one whose
// renewals a loaded machine holds up past the lease (1s was little margin)
// would have its batch taken over by the other replica reading it, as if
// it had died.
func startReplica(t *testing.T, bin, redisAddr, config string) *child {
	t.Helper()
	return startChild(t, exec.Command(bin, "serve", "--diag", "--listen", "127.0.0.1:0", "--no-workspace",
		"--store", "redis://"+redisAddr+"/0", "--batch-lease", "5s", "--config", config))
}

// TestReplicasShareDetachedBatches: two real replicas on one real Redis.
// A batch runs on A; it is attached, approved and cancelled through B.
// Then A is SIGKILLed mid-batch: after its lease, B reports the calls that
// had not finished as CANCELLED (owner lost), and sending the batch again
// with the same idempotency keys replays the finished calls and runs the
// rest.
func TestReplicasShareDetachedBatches(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	bin := buildToolwire(t)
	t.Parallel()
	config := writeFile(t, "toolwire.yaml", approvalsConfig)
	a := startReplica(t, bin, redisAddr, config)
	b := startReplica(t, bin, redisAddr, config)
	cb, err := client.New(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()

	// Held on A, approved and followed through B.
	evs := startDetached(t, a.addr, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("e", "echo", map[string]string{"text": "approved on B"}),
		client.Call("s", "sleep", map[string]int{"ms": 60000}),
	}}, isAwaiting)
	id := evs[0].GetAccepted().GetBatchId()
	if st, err := cb.ToolService().GetBatch(ctx, &toolwirev1.GetBatchRequest{BatchId: id}); err != nil || st.GetState() != toolwirev1.BatchState_BATCH_STATE_AWAITING_APPROVAL {
		t.Fatalf("GetBatch on B: %v %v, want AWAITING_APPROVAL", st.GetState(), err)
	}
	if _, err := cb.ToolService().ResolveApproval(ctx, &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: "e", Approved: true}); err != nil {
		t.Fatalf("ResolveApproval on B: %v", err)
	}
	var onB []*toolwirev1.ExecuteBatchResponse
	for ev, err := range cb.Attach(ctx, id, uint64(len(evs))) {
		if err != nil {
			t.Fatalf("Attach on B: %v", err)
		}
		onB = append(onB, ev)
		if r := ev.GetResult(); r.GetCallId() == "e" {
			if _, err := cb.ToolService().CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: id, Reason: "enough"}); err != nil {
				t.Fatalf("CancelBatch on B: %v", err)
			}
		}
	}
	res := results(onB)
	slices.Sort(res)
	if !slices.Equal(res, []string{"e:UNSPECIFIED", "s:CANCELLED"}) || onB[len(onB)-1].GetFinished() == nil {
		t.Fatalf("events on B: results %v, want e run and s CANCELLED, then BatchFinished", res)
	}
	for i, ev := range onB {
		if ev.GetSeq() != uint64(len(evs)+i+1) {
			t.Fatalf("event %d on B has seq %d, want %d", i, ev.GetSeq(), len(evs)+i+1)
		}
	}

	// A dies mid-batch.
	key := fmt.Sprint("k", time.Now().UnixNano())
	calls := func() []*toolwirev1.ToolCall {
		e := client.Call("fast", "echo", map[string]string{"text": "ran once"})
		e.IdempotencyKey = key + "-fast"
		// Long enough that A is surely killed while it sleeps, however
		// loaded the machine (300 ms was not: A once finished it first).
		s := client.Call("slow", "sleep", map[string]int{"ms": 600000})
		s.IdempotencyKey = key + "-slow"
		return []*toolwirev1.ToolCall{e, s}
	}
	// echo is held on both replicas: the first batch's echo is approved on
	// A's side before it dies; the resend's on B.
	evs = startDetached(t, a.addr, &toolwirev1.ExecuteBatchRequest{Calls: calls(), Options: &toolwirev1.BatchOptions{Sequential: true}}, isAwaiting)
	id = evs[0].GetAccepted().GetBatchId()
	if _, err := cb.ToolService().ResolveApproval(ctx, &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: "fast", Approved: true}); err != nil {
		t.Fatalf("ResolveApproval: %v", err)
	}
	// Wait until the fast call has finished and the slow one started, then
	// kill A.
	var beforeKill []*toolwirev1.ExecuteBatchResponse
	for ev, err := range cb.Attach(ctx, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		beforeKill = append(beforeKill, ev)
		if ev.GetStarted().GetCallId() == "slow" {
			break
		}
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	a.stopped = true
	var afterKill []*toolwirev1.ExecuteBatchResponse
	for ev, err := range cb.Attach(ctx, id, 0) {
		if err != nil {
			t.Fatalf("Attach on B after A died: %v", err)
		}
		afterKill = append(afterKill, ev)
	}
	res = results(afterKill)
	slices.Sort(res)
	if !slices.Equal(res, []string{"fast:UNSPECIFIED", "slow:CANCELLED"}) {
		t.Fatalf("after A died: results %v, want fast run, slow CANCELLED\nbefore: %v\nafter: %v", res, beforeKill, afterKill)
	}
	for _, ev := range afterKill {
		if r := ev.GetResult(); r.GetCallId() == "slow" && !strings.Contains(r.GetContent()[0].GetText().GetText(), "owner lost") {
			t.Errorf("slow's result %q, want it to say owner lost", r.GetContent()[0].GetText().GetText())
		}
	}
	if st, err := cb.ToolService().GetBatch(ctx, &toolwirev1.GetBatchRequest{BatchId: id}); err != nil || st.GetState() != toolwirev1.BatchState_BATCH_STATE_CANCELLED {
		t.Errorf("GetBatch on B after A died: %v %v, want CANCELLED", st.GetState(), err)
	}

	// The runtime sends the batch again, with the same keys, to B: the
	// fast call is replayed (approval comes before idempotency, so it is
	// asked again, and approved), the slow one runs: it starts, rather than
	// being replayed, and is cancelled then rather than slept out.
	var againID string
	slowStarted := false
	again := runBatchOn(t, cb, ctx, calls(), func(ev *toolwirev1.ExecuteBatchResponse) {
		if a := ev.GetAccepted(); a != nil {
			againID = a.GetBatchId()
		}
		if ev.GetStarted().GetCallId() == "slow" {
			slowStarted = true
			if _, err := cb.ToolService().CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: againID, Reason: "it ran"}); err != nil {
				t.Errorf("CancelBatch of the resent batch: %v", err)
			}
		}
	})
	if len(again) != 2 {
		t.Fatalf("the resent batch has %d results, want 2", len(again))
	}
	for _, r := range again {
		switch r.GetCallId() {
		case "fast":
			if !r.GetReplayed() {
				t.Errorf("fast resent: %v, want replayed", r)
			}
		case "slow":
			if !slowStarted || r.GetReplayed() || r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED {
				t.Errorf("slow resent: %v (started: %v), want it run (started, not replayed) until cancelled", r, slowStarted)
			}
		}
	}
}

// runBatchOn runs calls on c (not detached), calling seen with each event,
// and returns the results.
func runBatchOn(t *testing.T, c *client.Client, ctx context.Context, calls []*toolwirev1.ToolCall, seen func(*toolwirev1.ExecuteBatchResponse)) []*toolwirev1.CallResult {
	t.Helper()
	var id string
	var out []*toolwirev1.CallResult
	for ev, err := range c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: calls}) {
		if err != nil {
			t.Fatalf("ExecuteBatch: %v", err)
		}
		if a := ev.GetAccepted(); a != nil {
			id = a.GetBatchId()
		}
		if aw := ev.GetAwaitingApproval(); aw != nil {
			if _, err := c.ToolService().ResolveApproval(ctx, &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: aw.GetCallId(), Approved: true}); err != nil && status.Code(err) != codes.NotFound {
				t.Fatalf("approve: %v", err)
			}
		}
		seen(ev)
		if r := ev.GetResult(); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// TestApprovalIsResolvedOnce: a held call's first decision stands, and a
// second one is told so (NotFound) rather than accepted and dropped. The
// store (a real Redis) freezes after the call is announced, which holds
// the call's clean-up after the approval, the moment a second decision
// was answered OK and dropped: here an approver denied a call another had
// approved, was told the denial took effect, and the call ran.
func TestApprovalIsResolvedOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	s := startServe(t, "--diag", "--store", srv.URL(), "--config", writeFile(t, "toolwire.yaml", approvalsConfig))
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	accepted, done := make(chan string, 1), make(chan []string, 1)
	go func() {
		var res []string
		for ev, err := range c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
			client.Call("e", "echo", map[string]string{"text": "approved"}),
		}}) {
			switch {
			case err != nil:
				res = append(res, err.Error())
			case ev.GetAwaitingApproval() != nil:
				accepted <- ev.GetAwaitingApproval().GetCallId()
			case ev.GetAccepted() != nil:
				accepted <- ev.GetAccepted().GetBatchId()
			case ev.GetResult() != nil:
				res = append(res, ev.GetResult().GetErrorKind().String()+" "+client.Text(ev.GetResult()))
			}
		}
		done <- res
	}()
	id, callID := <-accepted, <-accepted
	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	resolve := func(approved bool) error {
		_, err := c.ToolService().ResolveApproval(ctx, &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: callID, Approved: approved, Message: "no"})
		return err
	}
	if err := resolve(true); err != nil {
		t.Fatalf("the approval: %v", err)
	}
	if err := resolve(false); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "resolved already") {
		t.Errorf("a denial after the approval: %v; want NotFound, resolved already", err)
	}
	srv.Thaw()
	thawed = true
	if res := <-done; !slices.Equal(res, []string{"ERROR_KIND_UNSPECIFIED approved"}) {
		t.Errorf("the batch's results %q; want the call run, as approved first", res)
	}
}
