package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/tools"
)

// admit is an Admission from functions: a nil one permits or allows.
type admit struct {
	permitted func(caller, tool string) bool
	decide    func(caller *Identity, t *tools.Tool, args json.RawMessage) Verdict
}

func (a admit) Permitted(caller *Identity, tool string) bool {
	return a.permitted == nil || a.permitted(caller.ID, tool)
}

func (a admit) Decide(_ context.Context, caller *Identity, t *tools.Tool, args json.RawMessage) Verdict {
	if a.decide == nil {
		return Verdict{}
	}
	return a.decide(caller, t, args)
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
	pol := admit{decide: func(caller *Identity, tl *tools.Tool, args json.RawMessage) Verdict {
		asked.Add(1)
		var a struct{ Text string }
		_ = json.Unmarshal(args, &a)
		if tl.Name == "shout" && a.Text == "rm" && caller.ID == "alice" {
			return Verdict{Effect: Deny, Rule: "no-rm", Reason: "only harmless words may be shouted"}
		}
		return Verdict{}
	}}
	te := newTestBedWith(t, Config{}, Deps{Admission: pol}, shout)
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
	pol := admit{decide: func(_ *Identity, tl *tools.Tool, _ json.RawMessage) Verdict {
		if tl.Name == "write" {
			return Verdict{Effect: Hold, Rule: "writes-need-a-human", Reason: "it writes"}
		}
		return Verdict{}
	}}
	te := newTestBedWith(t, Config{Approvers: []string{"carol"}}, Deps{Admission: pol})
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

// TestAdmissionAskedOncePerCall: the engine asks Permitted once per call,
// when it plans the batch, and Decide once per call that reaches it; a
// denial that names no rule is NOT_PERMITTED with the reason and no
// details.
func TestAdmissionAskedOncePerCall(t *testing.T) {
	t.Parallel()
	var permittedAsked, decideAsked atomic.Int32
	a := admit{
		permitted: func(_, tool string) bool { permittedAsked.Add(1); return tool != "fail" },
		decide: func(_ *Identity, tl *tools.Tool, _ json.RawMessage) Verdict {
			decideAsked.Add(1)
			if tl.Name == "sleep" {
				return Verdict{Effect: Deny, Reason: "sleeping is not for this caller"}
			}
			return Verdict{}
		},
	}
	te := newTestBedWith(t, Config{}, Deps{Admission: a})
	res := results(t, te.runAs(t, "alice", calls(
		call("a", "echo", `{"text":"1"}`),
		call("b", "echo", `{"text":"2"}`),
		call("refused", "fail", `{"message":"x"}`),
		call("denied", "sleep", `{"ms":1}`))))
	if n := permittedAsked.Load(); n != 4 {
		t.Errorf("Permitted asked %d times for 4 calls, want 4", n)
	}
	if n := decideAsked.Load(); n != 3 {
		t.Errorf("Decide asked %d times, want 3 (every permitted call, once)", n)
	}
	if r := res["refused"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED || !strings.HasPrefix(text(r), `not permitted: this caller may not call "fail"`) {
		t.Errorf("refused call: %v %q", r.GetErrorKind(), text(r))
	}
	if r := res["denied"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED || text(r) != "not permitted: sleeping is not for this caller. Nothing was run." || r.GetDetails() != "" {
		t.Errorf("denied call: %v %q details %q", r.GetErrorKind(), text(r), r.GetDetails())
	}
	if text(res["a"]) != "1" || text(res["b"]) != "2" {
		t.Errorf("allowed calls: %q, %q", text(res["a"]), text(res["b"]))
	}
}

// TestAStepThatPanicsEndsItsCall: a panic on a call's path before its
// tool runs (a policy here; a schema's validator did, on a number it
// could not build) ends that call INTERNAL, logged with its stack; the
// batch's other calls, and the engine, go on.
func TestAStepThatPanicsEndsItsCall(t *testing.T) {
	t.Parallel()
	pol := admit{decide: func(_ *Identity, _ *tools.Tool, args json.RawMessage) Verdict {
		if strings.Contains(string(args), "boom") {
			panic("policy bug")
		}
		return Verdict{}
	}}
	logs := &logbuf.Buffer{}
	te := newTestBedWith(t, Config{}, Deps{Admission: pol, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	for range 2 {
		events := te.run(t, calls(call("a", "echo", `{"text":"1"}`), call("boom", "echo", `{"text":"boom"}`), call("c", "echo", `{"text":"3"}`)))
		res := results(t, events)
		if r := res["boom"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INTERNAL || !strings.Contains(text(r), "panic: policy bug") {
			t.Errorf("the call whose policy panicked: %v %q", r.GetErrorKind(), text(r))
		}
		if text(res["a"]) != "1" || text(res["c"]) != "3" {
			t.Errorf("the other calls: %q, %q", text(res["a"]), text(res["c"]))
		}
		if events[len(events)-1].GetFinished() == nil {
			t.Error("the batch did not finish")
		}
	}
	if !strings.Contains(logs.String(), `"a call's step panicked"`) || !strings.Contains(logs.String(), "admission.go") {
		t.Errorf("no log line with the stack:\n%.2000s", logs.String())
	}
}
