package mcpsource

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/toolwire/toolwire/tools"
)

// TestForwarderSlowReader: while the reader is stuck, reports are queued
// without blocking (the server's other messages go on), in order; past
// maxQueued the latest replaces the last queued, and finish delivers it.
func TestForwarderSlowReader(t *testing.T) {
	t.Parallel()
	const n = maxQueued * 4
	release := make(chan struct{})
	var got []float64
	call := tools.NewCall("c", "t", json.RawMessage(`{}`), func(p tools.Progress) {
		<-release
		got = append(got, *p.Progress)
	})
	f := &forwarder{call: call}
	added := make(chan struct{})
	go func() {
		for i := 1; i <= n; i++ {
			v := float64(i)
			f.add(tools.Progress{Progress: &v})
		}
		close(added)
	}()
	select {
	case <-added:
	case <-time.After(waitLimit):
		t.Fatal("add blocked behind a slow reader")
	}
	close(release)
	f.finish(context.Background())
	if len(got) > maxQueued+1 || got[len(got)-1] != n || !slices.IsSorted(got) || got[maxQueued-2] != float64(maxQueued-1) {
		t.Errorf("delivered %d reports %v; want the first %d in order, then the latest (%d)", len(got), got, maxQueued-1, n)
	}
	v := float64(n + 1)
	f.add(tools.Progress{Progress: &v})
	if got[len(got)-1] != n {
		t.Errorf("a report after finish was delivered: %v", got[len(got)-1])
	}
}

// TestForwarderCancelled: finish does not wait for a stuck reader once the
// call's context is done; the delivering goroutine ends when the reader lets
// go, as the server's does when the batch ends.
func TestForwarderCancelled(t *testing.T) {
	t.Parallel()
	blocked, stop := make(chan struct{}), make(chan struct{})
	call := tools.NewCall("c", "t", json.RawMessage(`{}`), func(tools.Progress) {
		close(blocked)
		<-stop
	})
	f := &forwarder{call: call}
	v := 1.0
	f.add(tools.Progress{Progress: &v})
	<-blocked
	f.mu.Lock()
	exit := f.running
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.finish(ctx) // returns although Report is stuck: ctx is done
	close(stop)
	select {
	case <-exit:
	case <-time.After(waitLimit):
		t.Fatal("the delivering goroutine did not end")
	}
}
