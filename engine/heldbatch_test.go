package engine

import (
	"context"
	"errors"
	"runtime"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// TestHeldBatchGoroutines holds detached one-call batches whose call waits
// for approval, their callers gone, and counts the goroutines and the
// stack each keeps: the held call's runner, and no writer, which gives its
// runner up while nothing is queued (before, each batch kept two, and 12
// KiB of stacks; now one, and 8 KiB).
func TestHeldBatchGoroutines(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 200 batches")
	}
	te := newTestBedWith(t, Config{Approvers: []string{"alice"}, MaxConcurrentBatches: 1000}, Deps{Admission: holdWrites})
	snap := te.reg.Snapshot()
	stacks := func() uint64 {
		for range 4 { // each collection halves a stack at most once
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	const n = 200
	before, goroutines := stacks(), runtime.NumGoroutine()
	holdDetached(t, te, snap, n)
	per := float64(stacks()-before) / n
	g := float64(runtime.NumGoroutine()-goroutines) / n
	t.Logf("%.0f bytes of stacks, %.2f goroutines per held detached batch", per, g)
	// One each, and a few idle runners, which exit after a while.
	if g > 1.25 {
		t.Errorf("a held detached batch keeps %.2f goroutines; want its call's one", g)
	}
}

// holdDetached starts n detached batches of one call held for approval,
// their callers gone, and returns once each is held.
func holdDetached(t *testing.T, te *testBed, snap *tools.Snapshot, n int) {
	t.Helper()
	for range n {
		ctx, cancel := context.WithCancel(as("alice"))
		held := make(chan struct{})
		sink := SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
			if ev.GetAwaitingApproval() != nil {
				close(held)
				cancel() // the caller leaves; the batch stays, held
			}
			return nil
		})
		req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("w", "write", `{"ms":1}`)}, Options: &toolwirev1.BatchOptions{Detach: true}}
		if err := te.e.Run(ctx, snap, req, sink); err != nil && !errors.Is(err, context.Canceled) && CodeOf(err) != Canceled {
			t.Fatalf("Run: %v", err)
		}
		<-held
	}
}
