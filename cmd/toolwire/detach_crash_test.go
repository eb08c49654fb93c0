package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/proto"
)

// TestDetachedEventsSurviveAKill: a real "toolwire serve" on a bolt file
// is SIGKILLed in the middle of a detached batch whose calls keep ending
// (its events written in groups, several in flight). Restarted on the same
// file, it has every event the client was sent, as sent and at the same
// seq: an event reaches a client only once the store has it on disk. The
// calls that had not ended are then reported CANCELLED (owner lost).
func TestDetachedEventsSurviveAKill(t *testing.T) {
	bin := buildToolwire(t)
	t.Parallel()
	db := filepath.Join(t.TempDir(), "toolwire.db")
	serve := func() *child {
		return startChild(t, exec.Command(bin, "serve", "--diag", "--listen", "127.0.0.1:0", "--no-workspace",
			"--store", "bolt://"+db, "--batch-lease", "1s"))
	}
	a := serve()
	ca, err := client.New(a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()

	// Sleeps of staggered lengths: results and progress keep coming.
	const n = 48
	var calls []*toolwirev1.ToolCall
	for i := range n {
		calls = append(calls, client.Call(fmt.Sprint("s", i), "sleep", map[string]int{"ms": 10 + 15*i}))
	}
	req := &toolwirev1.ExecuteBatchRequest{Calls: calls, Options: &toolwirev1.BatchOptions{Detach: true, MaxParallel: n}}
	var sent []*toolwirev1.ExecuteBatchResponse
	for ev, err := range ca.ExecuteBatch(ctx, req) {
		if err != nil {
			t.Fatalf("ExecuteBatch: %v", err)
		}
		sent = append(sent, ev)
		if len(results(sent)) == n/3 {
			break
		}
	}
	// Killed at once, with calls still ending and their events being written.
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	a.stopped = true
	id := sent[0].GetAccepted().GetBatchId()

	b := serve()
	cb, err := client.New(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	var logged []*toolwirev1.ExecuteBatchResponse
	for ev, err := range cb.Attach(ctx, id, 0) {
		if err != nil {
			t.Fatalf("Attach after the restart: %v", err)
		}
		logged = append(logged, ev)
	}
	if len(logged) < len(sent) {
		t.Fatalf("after the restart the batch has %d events; the client had been sent %d", len(logged), len(sent))
	}
	for i, ev := range sent {
		if !proto.Equal(ev, logged[i]) {
			t.Fatalf("event %d the client was sent is not in the log after the restart:\nsent   %v\nlogged %v", i+1, ev, logged[i])
		}
	}
	for i, ev := range logged {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d after the restart has seq %d", i+1, ev.GetSeq())
		}
	}
	if got := len(results(logged)); got != n || logged[len(logged)-1].GetFinished() == nil {
		t.Fatalf("after the restart: %d results, last event %v; want %d results, then BatchFinished", got, logged[len(logged)-1], n)
	}
	t.Logf("the client had %d events (%d results); the log after the restart %d", len(sent), len(results(sent)), len(logged))
}
