package engine

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
)

// TestClusterFailover: two replicas share a Redis Cluster of their own (3
// masters, 3 replicas). A detached batch and a batch of keyed calls run on
// A, their calls blocked, with the batch's event log and the calls'
// records on one master; that master fails over — gracefully (CLUSTER
// FAILOVER on its replica: MOVED answers), frozen (SIGSTOP: no answers,
// and none sent again, until the cluster promotes the replica; the old
// master, let go on, turns replica) and by a crash (SIGKILL: no
// answers until the cluster promotes the replica) — and the calls finish
// meanwhile. Nothing is lost: the detached batch ends normally with every
// call's own result, and every event its client was sent is read back
// through B (AttachBatch). Nothing runs twice: each call ran once, and the
// keyed calls sent again to B are replayed.
func TestClusterFailover(t *testing.T) {
	cl := testenv.StartRedisCluster(t)
	for _, tc := range []struct {
		name string
		// fail fails master over, calling meanwhile while the master's
		// slots cannot be written, if there is such a time.
		fail func(t *testing.T, master *testenv.RedisNode, meanwhile func())
	}{
		{"graceful", func(t *testing.T, m *testenv.RedisNode, meanwhile func()) {
			cl.Failover(t, m)
			meanwhile()
		}},
		{"freeze", func(t *testing.T, m *testenv.RedisNode, meanwhile func()) {
			// A master that stops answering without closing its
			// connections (SIGSTOP): what is sent to it gets no answer,
			// so it is not sent again; once its replica is promoted it
			// goes on, turned replica (so its shard keeps a replica: the
			// crash, which leaves none, comes last).
			cl.WaitReplicated(t, m)
			m.Freeze()
			meanwhile()
			cl.WaitFailover(t, m)
			m.Thaw()
		}},
		{"crash", func(t *testing.T, m *testenv.RedisNode, meanwhile func()) {
			// A crash loses what the replica had not yet received (Redis
			// replicates asynchronously): this test is about the client
			// side, so it kills the master once the replica has it all.
			cl.WaitReplicated(t, m)
			m.Kill()
			meanwhile()
			cl.WaitFailover(t, m)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("%s%d:", tc.name, time.Now().UnixNano())
			open := func() *redis.Store {
				st, err := redis.Open(context.Background(), cl.URL(), redis.Options{Prefix: prefix, BreakerCooldown: 100 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			c := newCounter()
			c.started = make(chan int, 16)
			bump := c.tool("bump")
			bump.Annotations.ReadOnly = true // one lane: the calls run at once
			replica := func(name string) *testBed {
				st := open()
				return newTestBedWith(t, Config{BatchLease: 20 * time.Second}, Deps{Idempotency: st, Vars: st, EventLog: st, Replica: name}, bump)
			}
			a, b := replica("a"), replica("b")

			const n = 3
			detached := &toolwirev1.ExecuteBatchRequest{}
			for i := range n {
				detached.Calls = append(detached.Calls, call(fmt.Sprint("d", i), "bump", fmt.Sprintf(`{"n":%d,"wait":true}`, i)))
			}
			lb := startDetached(t, as("alice"), a, detached)
			for range n {
				<-c.started
			}
			id := batchIDOf(t, lb.snapshot())
			master := cl.MasterOf(t, prefix+"log:{"+logName("alice", id)+"}")

			// Keys whose records live on the same master (store/redis's
			// layout: the record of key k of caller c's tool t is
			// idem:{"c"/"t"/k}).
			var keys []string
			for i := 0; len(keys) < n; i++ {
				k := fmt.Sprint("k", i)
				if cl.MasterOf(t, prefix+"idem:{"+strconv.Quote("alice")+"/"+strconv.Quote("bump")+"/"+k+"}") == master {
					keys = append(keys, k)
				}
			}
			keyedReq := func(prefix string) *toolwirev1.ExecuteBatchRequest {
				r := &toolwirev1.ExecuteBatchRequest{Options: &toolwirev1.BatchOptions{MaxParallel: n}}
				for i, k := range keys {
					r.Calls = append(r.Calls, keyed(fmt.Sprint(prefix, i), "bump", fmt.Sprintf(`{"n":%d,"wait":true}`, 10+i), k))
				}
				return r
			}
			keyedDone := make(chan []*toolwirev1.ExecuteBatchResponse, 1)
			go func() {
				events, _ := a.runErr(as("alice"), keyedReq("a"))
				keyedDone <- events
			}()
			for range n {
				<-c.started
			}

			// The calls finish while the master cannot be written (after
			// the graceful failover: at once); their events and records
			// go to the new master.
			tc.fail(t, master, func() { close(c.gate) })

			events := ownResults(t, lb, n)
			// Every event the client was sent is in the store, in order,
			// read through the other replica.
			sameEvents(t, "Attach on B", events, attachAll(t, b, id))
			// What A could not write while the master was gone, it writes
			// once the new one answers.
			keyedOnce(t, a, b, <-keyedDone, keyedReq("b"), n)
			ranOnce(t, c, "detached call", 0, n)
			ranOnce(t, c, "keyed call", 10, n)
		})
	}
}

// TestClusterReshard: the slot that holds a detached batch's event log
// and the records of keyed calls moves to another master (as
// redis-cli --cluster reshard moves slots when a master is added) while
// the batches run: their writes meet the slot half moved, their keys
// moved one at a time, and are answered ASK (a key already gone) or
// TRYAGAIN (a script's keys split between the two masters). Nothing is
// lost: the detached batch ends with every call's own result, a reader
// that followed it live on B (AttachBatch) read what its client was sent,
// and the keyed calls succeed. Nothing runs twice: each call ran once and
// the keyed calls sent again to B are replayed.
func TestClusterReshard(t *testing.T) {
	cl := testenv.StartRedisCluster(t)
	prefix := fmt.Sprintf("reshard%d:", time.Now().UnixNano())
	c := newCounter()
	c.started = make(chan int, 256)
	bump := c.tool("bump")
	replica := func(name string) *testBed {
		st, err := redis.Open(context.Background(), cl.URL(), redis.Options{Prefix: prefix, BreakerCooldown: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return newTestBedWith(t, Config{BatchLease: 20 * time.Second}, Deps{Idempotency: st, Vars: st, EventLog: st, Replica: name}, bump)
	}
	a, b := replica("a"), replica("b")

	// The detached batch: calls one after another, each a few milliseconds,
	// so that its events are written all through the move.
	const n = 40
	detached := &toolwirev1.ExecuteBatchRequest{}
	for i := range n {
		// The last waits for the move to end: the batch is still
		// writing then, and finishes on the new master.
		detached.Calls = append(detached.Calls, call(fmt.Sprint("d", i), "bump", fmt.Sprintf(`{"n":%d,"ms":15,"wait":%v}`, i, i == n-1)))
	}
	lb := startDetached(t, as("alice"), a, detached)
	id := batchIDOf(t, lb.snapshot())
	slot := testenv.KeySlot(prefix + "log:{" + logName("alice", id) + "}")

	// Keys whose records live in the same slot (store/redis's layout: the
	// record of key k of caller c's tool t is idem:{"c"/"t"/k}).
	var keys []string
	for i := 0; len(keys) < 4; i++ {
		k := fmt.Sprint("k", i)
		if testenv.KeySlot(prefix+"idem:{"+strconv.Quote("alice")+"/"+strconv.Quote("bump")+"/"+k+"}") == slot {
			keys = append(keys, k)
		}
	}
	keyedReq := func(prefix string) *toolwirev1.ExecuteBatchRequest {
		r := &toolwirev1.ExecuteBatchRequest{}
		for i, k := range keys {
			r.Calls = append(r.Calls, keyed(fmt.Sprint(prefix, i), "bump", fmt.Sprintf(`{"n":%d,"ms":40,"wait":%v}`, 1000+i, i == len(keys)-1), k))
		}
		return r
	}
	keyedDone := make(chan []*toolwirev1.ExecuteBatchResponse, 1)
	go func() {
		events, _ := a.runErr(as("alice"), keyedReq("a"))
		keyedDone <- events
	}()
	// A reader on B from the start, following the batch live.
	var live recorder
	liveDone := make(chan error, 1)
	go func() { liveDone <- b.e.Attach(as("alice"), id, 0, &live) }()

	from := cl.MasterOf(t, prefix+"log:{"+logName("alice", id)+"}")
	var to *testenv.RedisNode
	for _, m := range cl.Masters(t) {
		if m != from {
			to = m
			break
		}
	}
	moved := 0
	cl.MigrateSlot(t, slot, to, func() { moved++; time.Sleep(30 * time.Millisecond) })
	if moved < 3 {
		t.Fatalf("%d keys moved; want at least the log's three", moved)
	}
	if now := cl.MasterOf(t, prefix+"log:{"+logName("alice", id)+"}"); now != to {
		t.Fatalf("the slot is on %s after the move, want %s", now.Addr, to.Addr)
	}
	close(c.gate)

	events := ownResults(t, lb, n)
	if err := <-liveDone; err != nil {
		t.Fatalf("the reader on B: %v", err)
	}
	sameEvents(t, "the live reader on B", events, live.events)
	sameEvents(t, "a reader on B afterwards", events, attachAll(t, b, id))
	keyedOnce(t, a, b, <-keyedDone, keyedReq("b"), len(keys))
	ranOnce(t, c, "detached call", 0, n)
	ranOnce(t, c, "keyed call", 1000, len(keys))
}

// ownResults waits for the detached batch lb of n calls ("d0"…) of bump to
// end and returns its events, failing unless each call has its own
// result, from its first run, and the batch finished with all n.
func ownResults(t *testing.T, lb *liveBatch, n int) []*toolwirev1.ExecuteBatchResponse {
	t.Helper()
	events, err := drain(lb)
	if err != nil {
		t.Fatalf("the detached batch's stream: %v", err)
	}
	got := results(t, events)
	for i := range n {
		if res := got[fmt.Sprint("d", i)]; res.GetIsError() || text(res) != fmt.Sprintf("ran n=%d (run 1)", i) {
			t.Errorf("detached call %d: %v; want its own result", i, res)
		}
	}
	if f := finishedOf(events); f.GetSucceeded() != uint32(n) {
		t.Fatalf("the detached batch's last event %v; want BatchFinished, %d succeeded", events[len(events)-1], n)
	}
	return events
}

// attachAll reads batch id's events on te from the start, as alice.
func attachAll(t *testing.T, te *testBed, id string) []*toolwirev1.ExecuteBatchResponse {
	t.Helper()
	var r recorder
	if err := te.e.Attach(as("alice"), id, 0, &r); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return r.events
}

// sameEvents fails t unless who read exactly the events the client was
// sent, in order.
func sameEvents(t *testing.T, who string, sent, read []*toolwirev1.ExecuteBatchResponse) {
	t.Helper()
	if len(read) != len(sent) {
		t.Fatalf("%s read %d events, the client was sent %d", who, len(read), len(sent))
	}
	for i := range sent {
		if !proto.Equal(sent[i], read[i]) {
			t.Errorf("%s: event %d: the client was sent %v, it read %v", who, i, sent[i], read[i])
		}
	}
}

// keyedOnce checks the n keyed calls of a batch on a (its events done):
// each succeeded, and once a has written their records, the same calls
// sent to b (resend) are replayed.
func keyedOnce(t *testing.T, a, b *testBed, done []*toolwirev1.ExecuteBatchResponse, resend *toolwirev1.ExecuteBatchRequest, n int) {
	t.Helper()
	for i, res := range results(t, done) {
		if res.GetIsError() {
			t.Errorf("keyed call %s: %v", i, res)
		}
	}
	waitFor(t, func() bool { return a.e.Stats().HeldRecords == 0 })
	resent := results(t, b.runAs(t, "alice", resend))
	for i := range n {
		if res := resent[resend.Calls[i].GetCallId()]; !res.GetReplayed() {
			t.Errorf("keyed call %d sent again to B: %v; want it replayed", i, res)
		}
	}
}

// ranOnce fails t unless bump ran once for each n from first to first+n-1.
func ranOnce(t *testing.T, c *counter, what string, first, n int) {
	t.Helper()
	for i := range n {
		if runs := c.count(first + i); runs != 1 {
			t.Errorf("%s %d ran %d times, want 1", what, i, runs)
		}
	}
}
