package engine

import (
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

func TestBatchesInFlight(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	before := time.Now()
	alice := startBatch(t, as("alice"), te, &toolwirev1.ExecuteBatchRequest{SessionId: "s1",
		Calls: []*toolwirev1.ToolCall{call("a", "hold", ""), call("b", "write", "")}})
	aliceID := batchIDOf(t, alice.snapshot())
	bob := startDetached(t, as("bob"), te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("c", "hold", "")}})
	bobID := batchIDOf(t, bob.snapshot())

	mine := te.e.Batches(as("alice"), false)
	if len(mine) != 1 {
		t.Fatalf("alice's batches: %+v, want one", mine)
	}
	f := mine[0]
	if f.ID != aliceID || f.Caller != "alice" || f.SessionID != "s1" || f.Calls != 2 || f.Detached || f.Started.Before(before) || f.Age(time.Now()) < 0 {
		t.Errorf("alice's batch: %+v, want %s of alice, session s1, 2 calls, not detached", f, aliceID)
	}
	// CallStarted is sent as the call sets out; its tool runs a moment later.
	waitFor(t, func() bool { return te.e.Batches(as("alice"), false)[0].Running == 1 })
	if got := te.e.Batches(as("alice"), false)[0]; got.Running != 1 || len(got.Active) != 1 || got.Active[0].ID != "a" || got.Active[0].Tool != "hold" || got.Active[0].Index != 0 || got.Active[0].Started.Before(f.Started) {
		t.Errorf("alice's batch runs %d calls, %+v; want 1, a of hold (write waits for its lane)", got.Running, got.Active)
	}
	if got := te.e.Batches(as("carol"), false); len(got) != 0 {
		t.Errorf("carol's batches: %+v, want none", got)
	}
	all := te.e.Batches(as("carol"), true)
	if len(all) != 2 || all[0].ID != aliceID || all[1].ID != bobID || !all[1].Detached || all[1].Caller != "bob" {
		t.Errorf("every batch: %+v, want alice's then bob's detached one", all)
	}

	for _, c := range []struct {
		caller, id string
		lb         *liveBatch
	}{{"alice", aliceID, alice}, {"bob", bobID, bob}} {
		if err := te.e.Cancel(as(c.caller), c.id, "done"); err != nil {
			t.Fatal(err)
		}
		_, _ = drain(c.lb)
	}
	waitFor(t, func() bool { return len(te.e.Batches(as(""), true)) == 0 })
}
