package engine

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// policyFunc is a Policy from a function.
type policyFunc func(caller *Identity, t *tools.Tool, args json.RawMessage) Verdict

func (f policyFunc) Evaluate(_ context.Context, caller *Identity, t *tools.Tool, args json.RawMessage) Verdict {
	return f(caller, t, args)
}

// TestPolicyRefusesByArguments: the policy step sees the caller's identity,
// the tool and the validated arguments; a call it denies gets NOT_PERMITTED
// with the rule's message and its name in details, is not run, and the
// batch goes on; an unknown tool or invalid arguments never reach it.
func TestPolicyRefusesByArguments(t *testing.T) {
	t.Parallel()
	var ran, asked atomic.Int32
	shout := tools.MustTyped("shout", "returns the text", func(_ context.Context, _ *tools.Call, in struct {
		Text string `json:"text"`
	}) (*tools.Result, any, error) {
		ran.Add(1)
		return tools.Text(in.Text), nil, nil
	})
	pol := policyFunc(func(caller *Identity, tl *tools.Tool, args json.RawMessage) Verdict {
		asked.Add(1)
		var a struct{ Text string }
		_ = json.Unmarshal(args, &a)
		if tl.Name == "shout" && a.Text == "rm" && caller.ID == "alice" {
			return Verdict{Deny: true, Rule: "no-rm", Message: "only harmless words may be shouted"}
		}
		return Verdict{}
	})
	te := newTestBedWith(t, Config{}, Deps{Policy: pol}, shout)
	res := results(t, te.runAs(t, "alice", calls(
		call("ok", "shout", `{"text":"hi"}`),
		call("denied", "shout", `{"text":"rm"}`),
		call("unknown", "nope", `{}`),
		call("invalid", "shout", `{"text":7}`),
		call("after", "shout", `{"text":"still runs"}`))))
	if text(res["ok"]) != "hi" || text(res["after"]) != "still runs" {
		t.Errorf("allowed calls: %q, %q", text(res["ok"]), text(res["after"]))
	}
	d := res["denied"]
	if d.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED || !strings.Contains(text(d), `policy "no-rm": only harmless words may be shouted`) || d.GetDetails() != `{"policy":"no-rm"}` {
		t.Errorf("denied call: %v %q details %q", d.GetErrorKind(), text(d), d.GetDetails())
	}
	if ran.Load() != 2 {
		t.Errorf("the tool ran %d times; want the two allowed calls only", ran.Load())
	}
	if asked.Load() != 3 {
		t.Errorf("the policy was asked %d times; want 3 (an unknown tool and invalid arguments end before it)", asked.Load())
	}
	// bob's identity does not match the rule.
	if r := results(t, te.runAs(t, "bob", calls(call("b", "shout", `{"text":"rm"}`))))["b"]; text(r) != "rm" {
		t.Errorf("bob's call: %v", r)
	}
}

// TestPolicyRequiresApproval: a policy's require_approval holds the call
// for a person, with the rule named in the reason, even with no approval
// rule configured; approved, it runs.
func TestPolicyRequiresApproval(t *testing.T) {
	t.Parallel()
	pol := policyFunc(func(_ *Identity, tl *tools.Tool, _ json.RawMessage) Verdict {
		if tl.Name == "write" {
			return Verdict{Approve: true, Rule: "writes-need-a-human", Message: "it writes"}
		}
		return Verdict{}
	})
	te := newTestBedWith(t, Config{Approvers: []string{"carol"}}, Deps{Policy: pol})
	lb := &liveBatch{started: make(chan struct{}), done: make(chan error, 1)}
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("w", "write", `{"ms":1}`)}}
	go func() { lb.done <- te.e.Run(as("alice"), te.reg.Snapshot(), req, lb) }()
	a := awaiting(t, lb)
	if a.GetCallId() != "w" || a.GetReason() != `policy "writes-need-a-human": it writes` {
		t.Fatalf("CallAwaitingApproval %v", a)
	}
	if err := te.e.ResolveApproval(as("carol"), batchIDOf(t, lb.snapshot()), "w", true, "", "Carol"); err != nil {
		t.Fatal(err)
	}
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	if r := results(t, events)["w"]; r.GetIsError() || text(r) != "done w" {
		t.Errorf("result %v; want the call run once approved", r)
	}
}
