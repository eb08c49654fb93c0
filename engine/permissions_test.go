package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/testing/protocmp"
)

// aliceMay lets alice call echo and "ghost" (which is not registered) and
// everyone else call anything.
var aliceMay = admit{permitted: func(caller, tool string) bool {
	return caller != "alice" || tool == "echo" || tool == "ghost"
}}

func TestToolsListsOnlyPermittedTools(t *testing.T) {
	t.Parallel()
	te := newTestBedWith(t, Config{}, Deps{Admission: aliceMay})
	names := func(ctx context.Context) []string {
		var out []string
		for _, t := range te.e.Tools(ctx, te.reg.Snapshot()) {
			out = append(out, t.GetName())
		}
		return out
	}
	if diff := cmp.Diff([]string{"echo"}, names(as("alice"))); diff != "" {
		t.Errorf("alice's listing (-want +got):\n%s", diff)
	}
	if got := names(as("bob")); len(got) < 5 {
		t.Errorf("bob's listing = %v, want every tool", got)
	}
}

func TestCallsNotPermittedAreRefusedAlikeAndNeverRun(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	secret := tools.Tool{Name: "secret", Description: "must not run for alice", Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			ran.Add(1)
			return tools.Text("secret ran"), nil
		}}
	te := newTestBedWith(t, Config{}, Deps{Admission: aliceMay}, secret)
	run := func(caller string, cs ...*toolwirev1.ToolCall) []*toolwirev1.ExecuteBatchResponse {
		return te.runAs(t, caller, calls(cs...))
	}

	res := results(t, run("alice",
		call("ok", "echo", `{"text":"hi"}`),
		call("known", "secret", `{}`),
		call("unknown", "nonexistent", `{}`),
		call("ghost", "ghost", `{}`),
		call("wrapped", "multi_tool_use.parallel", `{"tool_uses":[{"recipient_name":"functions.echo"}]}`)))
	if r := res["wrapped"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL || !strings.Contains(text(r), "Call each tool directly") {
		t.Errorf("wrapper call for alice: %v %q, want the wrapper explanation", r.GetErrorKind(), text(r))
	}
	if r := res["ok"]; r.GetIsError() || text(r) != "hi" {
		t.Errorf("permitted call: %v", r)
	}
	for _, id := range []string{"known", "unknown"} {
		if k := res[id].GetErrorKind(); k != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED {
			t.Errorf("call %q: kind %v, want NOT_PERMITTED", id, k)
		}
	}
	// The refusal must not tell a forbidden tool from a missing one.
	known := strings.ReplaceAll(text(res["known"]), `"secret"`, `NAME`)
	unknown := strings.ReplaceAll(text(res["unknown"]), `"nonexistent"`, `NAME`)
	if known != unknown {
		t.Errorf("refusals differ:\n forbidden: %s\n   unknown: %s", known, unknown)
	}
	// A permitted but unknown name lists only what alice may call.
	if r := res["ghost"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL || strings.Contains(text(r), "secret") || !strings.Contains(text(r), "echo") {
		t.Errorf("unknown tool for alice: %v %q, want UNKNOWN_TOOL listing only echo", r.GetErrorKind(), text(r))
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the forbidden tool ran %d times", n)
	}

	// The lane plan treats a forbidden read-only tool like an unknown one.
	lanes := func(events []*toolwirev1.ExecuteBatchResponse) []*toolwirev1.Lane {
		return events[0].GetAccepted().GetLanes()
	}
	forbidden := lanes(run("alice", call("1", "echo", `{"text":""}`), call("2", "secret", ""), call("3", "echo", `{"text":""}`)))
	missing := lanes(run("alice", call("1", "echo", `{"text":""}`), call("2", "nonexistent", ""), call("3", "echo", `{"text":""}`)))
	if diff := cmp.Diff(missing, forbidden, protocmp.Transform()); diff != "" {
		t.Errorf("lane plans of a forbidden and a missing tool differ (-missing +forbidden):\n%s", diff)
	}

	if r := results(t, run("bob", call("b", "secret", "")))["b"]; text(r) != "secret ran" {
		t.Errorf("bob's call of secret: %v", r)
	}
}
