package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// TestReplicasShareARedisCluster: two real "toolwire serve"s on the shared
// Redis Cluster (--store redis+cluster://…). A detached batch on A is read
// and cancelled through B; a keyed call run on A is replayed when sent
// again to B. (The rate limit shared through the cluster is
// store/redis's TestTakeRateRedisCluster: a serve's keys have no prefix of
// the test's own, so an allowance would outlive one run.)
func TestReplicasShareARedisCluster(t *testing.T) {
	url := testenv.RedisClusterURL(t)
	bin := buildToolwire(t)
	t.Parallel()
	start := func() *child {
		return startChild(t, exec.Command(bin, "serve", "--diag", "--listen", "127.0.0.1:0", "--no-workspace",
			"--store", url, "--batch-lease", "2s"))
	}
	a, b := start(), start()
	waitLog(t, a.log, `"store":"redis-cluster"`)
	// The cluster's failover (CI's: a node timeout of 5 s) outlasts the
	// batch lease of 2 s: serve says so, naming it.
	waitLog(t, a.log, `"level":"WARN"`, `batch_lease (2s) is not longer than the Redis Cluster's failover`)
	cb, err := client.New(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	// 1. A detached batch on A, followed and cancelled through B.
	evs := startDetached(t, a.addr, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("e", "echo", map[string]string{"text": "on A"}),
		client.Call("s", "sleep", map[string]int{"ms": 60000}),
	}, Options: &toolwirev1.BatchOptions{Sequential: true}}, func(ev *toolwirev1.ExecuteBatchResponse) bool {
		return ev.GetStarted().GetCallId() == "s"
	})
	id := evs[0].GetAccepted().GetBatchId()
	var onB []*toolwirev1.ExecuteBatchResponse
	for ev, err := range cb.Attach(ctx, id, 0) {
		if err != nil {
			t.Fatalf("Attach on B: %v", err)
		}
		onB = append(onB, ev)
		if ev.GetStarted().GetCallId() == "s" {
			if _, err := cb.ToolService().CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: id, Reason: "enough"}); err != nil {
				t.Fatalf("CancelBatch on B: %v", err)
			}
		}
	}
	res := results(onB)
	slices.Sort(res)
	if !slices.Equal(res, []string{"e:UNSPECIFIED", "s:CANCELLED"}) || onB[len(onB)-1].GetFinished() == nil {
		t.Fatalf("events on B: results %v, want e run and s CANCELLED, then BatchFinished", res)
	}
	for i, ev := range onB {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d on B has seq %d, want %d", i, ev.GetSeq(), i+1)
		}
	}

	// 2. A keyed call on A, sent again to B: replayed, not run.
	ca, err := client.New(a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	keyedCall := func() []*toolwirev1.ToolCall {
		c := client.Call("k", "echo", map[string]string{"text": "once"})
		c.IdempotencyKey = fmt.Sprint("cluster-", time.Now().UnixNano())
		return []*toolwirev1.ToolCall{c}
	}
	calls := keyedCall()
	first := runBatchOn(t, ca, ctx, calls, func(*toolwirev1.ExecuteBatchResponse) {})
	again := runBatchOn(t, cb, ctx, calls, func(*toolwirev1.ExecuteBatchResponse) {})
	if len(first) != 1 || first[0].GetReplayed() || len(again) != 1 || !again[0].GetReplayed() {
		t.Fatalf("keyed call on A then B: %v then %v; want run, then replayed", first, again)
	}
}
