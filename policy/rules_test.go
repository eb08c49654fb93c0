package policy_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

func TestPermissions(t *testing.T) {
	t.Parallel()
	p := policy.Permissions{
		"reader": {Allow: []string{"fs.read*", "echo"}},
		"admin":  {Deny: []string{"fs.delete"}},
		"mixed":  {Allow: []string{"fs.*"}, Deny: []string{"fs.write"}},
		"*":      {Allow: []string{"echo"}},
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caller, tool string
		want         bool
	}{
		{"reader", "fs.read_file", true},
		{"reader", "echo", true},
		{"reader", "fs.write", false},
		{"admin", "fs.write", true},
		{"admin", "fs.delete", false},
		{"mixed", "fs.read", true},
		{"mixed", "fs.write", false}, // deny wins over allow
		{"stranger", "echo", true},   // "*" applies
		{"stranger", "fs.read", false},
		{"", "fs.read", false}, // the anonymous caller too
	} {
		if got := p.Permitted(tc.caller, tc.tool); got != tc.want {
			t.Errorf("Permitted(%q, %q) = %v, want %v", tc.caller, tc.tool, got, tc.want)
		}
	}
	if !(policy.Permissions{"x": {Deny: []string{"*"}}}).Permitted("y", "anything") {
		t.Error("a caller without rules and no \"*\" entry is refused; want everything permitted")
	}
	if err := (policy.Permissions{"x": {Allow: []string{"fs.[a"}}}).Validate(); err == nil || err.Error() != `permissions of "x": pattern "fs.[a": syntax error in pattern` {
		t.Errorf("Validate of a malformed pattern: %v", err)
	}
}

// TestRulesInOrder: the set answers one verdict, its rules asked in order:
// permissions first (whatever a policy says), then the policies (the
// first that holds decides; allow ends the policies but not the approval
// rules), then the approval rules, which name tools and callers as
// permissions do.
func TestRulesInOrder(t *testing.T) {
	t.Parallel()
	var live policy.Live
	live.Swap(mustCompile(t,
		policy.Rule{Name: "admins", Effect: policy.Allow, When: `"admins" in caller.groups`},
		policy.Rule{Name: "no-rm", Effect: policy.Deny, Message: "no rm", When: `tool.name == "run_command" && args.argv[0] == "rm"`},
		policy.Rule{Name: "big-charges", Effect: policy.RequireApproval, Message: "a big charge", When: `tool.name == "payments_charge" && args.amount >= 1000`},
	))
	r, err := policy.New(
		policy.Permissions{"bob": {Deny: []string{"payments_*"}}},
		&live,
		[]policy.ApprovalRule{
			{Tools: []string{"run_*"}, Callers: []string{"carol", "alice"}, Reason: "commands of people need a nod"},
			{Tools: []string{"payments_?harge"}},
		})
	if err != nil {
		t.Fatal(err)
	}
	bob, carol := &engine.Identity{ID: "bob"}, &engine.Identity{ID: "carol"}
	for _, c := range []struct {
		name   string
		who    *engine.Identity
		tool   *tools.Tool
		args   string
		effect engine.Effect
		rule   string
		reason string
	}{
		{"a permission refuses first", bob, payments, `{"amount":5}`, engine.Deny, "", `this caller may not call "payments_charge"`},
		{"a policy denies", carol, runCommand, `{"argv":["rm"]}`, engine.Deny, "no-rm", "no rm"},
		{"a policy holds", carol, payments, `{"amount":5000}`, engine.Hold, "big-charges", "a big charge"},
		{"an approval rule holds, by tool", carol, payments, `{"amount":5}`, engine.Hold, "", "calls of payments_charge need approval"},
		{"an approval rule holds, by caller", carol, runCommand, `{"argv":["ls"]}`, engine.Hold, "", "commands of people need a nod"},
		{"an approval rule's callers", builder, runCommand, `{"argv":["ls"]}`, engine.Allow, "", ""},
		{"a policy's allow still meets the approval rules", alice, runCommand, `{"argv":["rm"]}`, engine.Hold, "", "commands of people need a nod"},
		{"nothing stops it", carol, readFile, `{"path":"a"}`, engine.Allow, "", ""},
	} {
		v := r.Decide(context.Background(), c.who, c.tool, json.RawMessage(c.args))
		if v.Effect != c.effect || v.Rule != c.rule || v.Reason != c.reason {
			t.Errorf("%s: %+v; want effect %d, rule %q, reason %q", c.name, v, c.effect, c.rule, c.reason)
		}
	}
	if r.Permitted(bob, "payments_refund") || !r.Permitted(bob, "echo") || !r.Permitted(carol, "payments_refund") {
		t.Error("Permitted does not follow the permissions")
	}
	// A reload's swap takes effect at the next call.
	live.Swap(mustCompile(t))
	if v := r.Decide(context.Background(), carol, runCommand, json.RawMessage(`{"argv":["rm"]}`)); v.Rule == "no-rm" {
		t.Errorf("after the policies were swapped out: %+v", v)
	}
}

// TestRulesRefuseMalformedPatterns: New and Config.Check refuse what
// cannot match, naming it as the config file does.
func TestRulesRefuseMalformedPatterns(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		perms     policy.Permissions
		approvals []policy.ApprovalRule
		want      string
	}{
		{policy.Permissions{"a": {Deny: []string{"["}}}, nil, `permissions of "a": pattern "["`},
		{nil, []policy.ApprovalRule{{Tools: []string{"ok"}}, {Reason: "no tools"}}, "approvals[1] names no tools"},
		{nil, []policy.ApprovalRule{{Tools: []string{"fs.[a"}}}, `approvals[0]: pattern "fs.[a"`},
	} {
		if _, err := policy.New(c.perms, nil, c.approvals); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%v, %v): %v; want an error containing %q", c.perms, c.approvals, err, c.want)
		}
		if c.approvals == nil {
			continue
		}
		if err := (policy.Config{Approvals: c.approvals}).Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check of %v: %v; want an error containing %q", c.approvals, err, c.want)
		}
	}
}

// TestRulesThroughTheEngine: an engine with the set as its Admission lists
// only what permissions allow, refuses by permission and by policy, and
// holds what an approval rule names until a person approves it.
func TestRulesThroughTheEngine(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	var live policy.Live
	live.Swap(mustCompile(t, policy.Rule{Name: "no-secrets", Effect: policy.Deny, Message: "do not echo secrets", When: `tool.name == "echo" && args.text == "secret"`}))
	r, err := policy.New(policy.Permissions{"*": {Deny: []string{"fail"}}}, &live, []policy.ApprovalRule{{Tools: []string{"sl*"}, Reason: "sleeping needs a nod"}})
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{Approvers: []string{"carol"}}, engine.Deps{Admission: r, Logger: slog.New(slog.DiscardHandler)})
	defer eng.Close()
	ctx := engine.WithIdentity(context.Background(), alice)
	for _, d := range eng.Tools(ctx, reg.Snapshot()) {
		if d.GetName() == "fail" {
			t.Error("ListTools lists a tool the permissions deny")
		}
	}
	results := map[string]*toolwirev1.CallResult{}
	held := make(chan string, 1)
	err = eng.Run(ctx, reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		{CallId: "ok", Name: "echo", Arguments: `{"text":"hi"}`},
		{CallId: "secret", Name: "echo", Arguments: `{"text":"secret"}`},
		{CallId: "refused", Name: "fail", Arguments: `{"message":"x"}`},
		{CallId: "held", Name: "sleep", Arguments: `{"ms":1}`},
	}}, engine.SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
		switch {
		case ev.GetAccepted() != nil:
			go func(id string) {
				callID := <-held
				if err := eng.ResolveApproval(engine.WithCaller(context.Background(), "carol"), id, callID, true, "", ""); err != nil {
					t.Errorf("ResolveApproval: %v", err)
				}
			}(ev.GetAccepted().GetBatchId())
		case ev.GetAwaitingApproval() != nil:
			if a := ev.GetAwaitingApproval(); a.GetReason() != "sleeping needs a nod" {
				t.Errorf("awaiting approval: %v", a)
			}
			held <- ev.GetAwaitingApproval().GetCallId()
		case ev.GetResult() != nil:
			results[ev.GetResult().GetCallId()] = ev.GetResult()
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	notPermitted := toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED
	if r := results["ok"]; r.GetIsError() {
		t.Errorf("allowed call: %v", r)
	}
	if r := results["secret"]; r.GetErrorKind() != notPermitted || r.GetDetails() != `{"policy":"no-secrets"}` || !strings.Contains(r.GetContent()[0].GetText().GetText(), `not permitted by policy "no-secrets": do not echo secrets`) {
		t.Errorf("call the policy denies: %v", r)
	}
	if r := results["refused"]; r.GetErrorKind() != notPermitted || !strings.Contains(r.GetContent()[0].GetText().GetText(), `may not call "fail"`) {
		t.Errorf("call the permissions refuse: %v", r)
	}
	if r := results["held"]; r.GetIsError() {
		t.Errorf("held call, approved: %v", r)
	}
}
