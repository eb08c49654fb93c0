package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store/memory"
)

// TestVarsUsersKeepTheirFormat: the engine's three users of Deps.Vars
// write where replicas of other versions look (the scopes, names and
// values a rolling upgrade shares), and a session's scope can never be a
// mailbox's, whatever the caller and session ID.
func TestVarsUsersKeepTheirFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	get := func(scope, name string) string {
		t.Helper()
		v, ok, err := m.GetVar(ctx, scope, name)
		if err != nil || !ok {
			t.Fatalf("nothing at %q %q: %v", scope, name, err)
		}
		return string(v)
	}

	approvals := approvalMail{m}
	if err := approvals.announce(ctx, "b1", "c1", pendingApproval{Caller: "alice", Tool: "write"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := get("approval:b1", "c1"); got != `{"caller":"alice","tool":"write"}` {
		t.Errorf("announcement %s", got)
	}
	if added, err := approvals.decide(ctx, "b1", "c1", decision{Approved: true, By: "carol"}); err != nil || !added {
		t.Fatal(added, err)
	}
	if added, err := approvals.decide(ctx, "b1", "c1", decision{By: "dave"}); err != nil || added {
		t.Fatalf("a second decision: added %v, %v; want the first to stand", added, err)
	}
	// The waiting call renews its announcement: a decision left
	// meanwhile stays.
	if err := approvals.announce(ctx, "b1", "c1", pendingApproval{Caller: "alice", Tool: "write"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := get("approval:b1", "decision:c1"); got != `{"approved":true,"by":"carol"}` {
		t.Errorf("decision %s", got)
	}
	if d, ok, _ := approvals.decision(ctx, "b1", "c1"); !ok || !d.Approved || d.By != "carol" {
		t.Errorf("decision read back: %+v %v", d, ok)
	}
	approvals.clear(ctx, "b1", "c1")
	if _, ok, _ := approvals.pending(ctx, "b1", "c1"); ok {
		t.Error("the announcement outlived clear")
	}
	if _, ok, _ := approvals.decision(ctx, "b1", "c1"); ok {
		t.Error("the decision outlived clear")
	}

	cancels := cancelMail{m}
	log := logName("alice", "b2")
	if err := cancels.request(ctx, log, "stop", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := get(`batch:"alice"/b2`, "cancel"); got != `"stop"` {
		t.Errorf("cancel request %s", got)
	}
	if r, ok, _ := cancels.requested(ctx, log); !ok || r != "stop" {
		t.Errorf("cancel request read back: %q %v", r, ok)
	}

	// The notices that follow a mailbox's write name it so (signals.go).
	if got := cancelTopic(log); got != `cancel:"alice"/b2` {
		t.Errorf("cancel topic %s", got)
	}
	if got := approvalTopic("b1", "c1"); got != "approval:b1/c1" {
		t.Errorf("approval topic %s", got)
	}

	for _, c := range [][2]string{{"alice", "s1"}, {"", "approval:b1"}, {"batch:", "x"}, {`"`, `"`}} {
		s := sessionScope(c[0], c[1])
		if !strings.HasPrefix(s, `"`) || strings.HasPrefix(s, "approval:") || strings.HasPrefix(s, "batch:") {
			t.Errorf("session scope %q of caller %q, session %q could meet a mailbox's", s, c[0], c[1])
		}
	}
	if got := sessionScope("alice", "s1"); got != `"alice"/s1` {
		t.Errorf("session scope %q", got)
	}
}
