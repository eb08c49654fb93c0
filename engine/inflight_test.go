package engine

import (
	"context"
	"sync/atomic"
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

	mine, n := te.e.Batches(as("alice"), false, 0)
	if len(mine) != 1 || n != 1 {
		t.Fatalf("alice's batches: %+v, want one", mine)
	}
	f := mine[0]
	if f.ID != aliceID || f.Caller != "alice" || f.SessionID != "s1" || f.Calls != 2 || f.Detached || f.Started.Before(before) || f.Age(time.Now()) < 0 {
		t.Errorf("alice's batch: %+v, want %s of alice, session s1, 2 calls, not detached", f, aliceID)
	}
	// CallStarted is sent as the call sets out; its tool runs a moment later.
	waitFor(t, func() bool { return first(te.e.Batches(as("alice"), false, 0)).Running == 1 })
	if got := first(te.e.Batches(as("alice"), false, 0)); got.Running != 1 || len(got.Active) != 1 || got.Active[0].ID != "a" || got.Active[0].Tool != "hold" || got.Active[0].Index != 0 || got.Active[0].Started.Before(f.Started) {
		t.Errorf("alice's batch runs %d calls, %+v; want 1, a of hold (write waits for its lane)", got.Running, got.Active)
	}
	if got, n := te.e.Batches(as("carol"), false, 0); len(got) != 0 || n != 0 {
		t.Errorf("carol's batches: %+v (%d), want none", got, n)
	}
	all, n := te.e.Batches(as("carol"), true, 0)
	if len(all) != 2 || n != 2 || all[0].ID != aliceID || all[1].ID != bobID || !all[1].Detached || all[1].Caller != "bob" {
		t.Errorf("every batch: %+v (%d), want alice's then bob's detached one", all, n)
	}
	if oldest, n := te.e.Batches(as("carol"), true, 1); len(oldest) != 1 || n != 2 || oldest[0].ID != aliceID {
		t.Errorf("the oldest batch: %+v of %d, want alice's of 2", oldest, n)
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
	waitFor(t, func() bool { _, n := te.e.Batches(as(""), true, 0); return n == 0 })
}

func first(l []InFlight, _ int) InFlight { return l[0] }

// valueCounter is a context that counts the values asked of it.
type valueCounter struct {
	context.Context
	asked atomic.Int64
}

func (c *valueCounter) Value(key any) any {
	c.asked.Add(1)
	return c.Context.Value(key)
}

// TestBatchesAskNoContext: Batches picks the batches of a caller by the ID
// each was admitted with. It used to ask each batch's context for its
// caller, under the engine's lock that admitting and ending batches take:
// behind a gRPC stream's context that was some 1 µs a batch, 14 ms a view
// of 10,000 batches, during which no batch could start or end.
func TestBatchesAskNoContext(t *testing.T) {
	t.Parallel()
	te := newTestBed(t, Config{})
	ctx := &valueCounter{Context: as("alice")}
	lb := startBatch(t, ctx, te, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "hold", "")}})
	id := batchIDOf(t, lb.snapshot())
	const views = 100
	before := ctx.asked.Load()
	for range views {
		if l, n := te.e.Batches(as("carol"), true, 0); n != 1 || l[0].ID != id || l[0].Caller != "alice" {
			t.Fatalf("every batch: %+v (%d), want alice's %s", l, n, id)
		}
		if _, n := te.e.Batches(as("bob"), false, 0); n != 0 {
			t.Fatalf("bob has %d batches, want none", n)
		}
	}
	// The batch's own run may ask its context meanwhile, but not once per view.
	if asked := ctx.asked.Load() - before; asked >= views {
		t.Errorf("%d views asked the batch's context %d times; want none of them to", 2*views, asked)
	}
	if err := te.e.Cancel(as("alice"), id, "done"); err != nil {
		t.Fatal(err)
	}
	_, _ = drain(lb)
}
