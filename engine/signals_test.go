package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/store/storetest"
)

// The tests of the notices between replicas (signals.go) set the owners'
// fallback poll to an hour: a cancel or an approval left on another
// replica then arrives through its notice, or not within the test.

// noPoll is the fallback poll that proves the notices: longer than any
// test.
const noPoll = time.Hour

// ended waits for lb's end and returns its events; the test fails when it
// never comes.
func ended(t *testing.T, lb *liveBatch, what string) []*toolwirev1.ExecuteBatchResponse {
	t.Helper()
	ctx, cancel := storetest.Bound(t)
	defer cancel()
	select {
	case err := <-lb.done:
		lb.done <- err
	case <-ctx.Done():
		t.Fatalf("%s: the batch never ended", what)
	}
	events, err := drain(lb)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return events
}

// replicaPair is two engines sharing a store, with a store handle each
// (the same one for a store one process holds), and the owner's handle
// when it subscribes (Redis), to wait until it has.
type replicaPair struct {
	a, b *testBed
	sub  *redis.Store
}

// pairOn returns two replicas on the handles open gives, the owner A's
// fallback poll set to poll.
func pairOn(t *testing.T, cfg Config, deps Deps, poll time.Duration, open func(t *testing.T) (store.Store, store.Store)) replicaPair {
	sa, sb := open(t)
	da, db := deps, deps
	da.Idempotency, da.Vars, da.EventLog, da.Replica = sa, sa, sa, "a"
	db.Idempotency, db.Vars, db.EventLog, db.Replica = sb, sb, sb, "b"
	p := replicaPair{a: newTestBedWith(t, cfg, da), b: newTestBedWith(t, cfg, db)}
	p.a.e.fallbackPoll = poll
	p.sub, _ = sa.(*redis.Store)
	return p
}

// subscribed waits until A's store has subscribed to its notices, so that
// a notice the test sends is not made redundant by the look every watcher
// takes once the subscription is made.
func (p replicaPair) subscribed(t *testing.T) {
	t.Helper()
	if p.sub == nil {
		return
	}
	waitFor(t, func() bool { n, _ := p.sub.Subscriptions(); return n > 0 })
}

// signalStores are the backends the cross-replica tests run on: two
// handles of one store each.
var signalStores = map[string]func(t *testing.T) (store.Store, store.Store){
	"memory": func(t *testing.T) (store.Store, store.Store) {
		m := memory.New(memory.Options{})
		t.Cleanup(func() { m.Close() })
		return m, m
	},
	"bolt": func(t *testing.T) (store.Store, store.Store) {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "toolwire.db"), bolt.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, s
	},
	"redis": func(t *testing.T) (store.Store, store.Store) {
		addr := testenv.RedisAddr(t)
		prefix := fmt.Sprintf("signals%d:", time.Now().UnixNano())
		open := func() store.Store {
			s, err := redis.Open(context.Background(), "redis://"+addr+"/0", redis.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return open(), open()
	},
}

// TestCancelAndApproveThroughAnotherReplica: a detached batch on A is
// cancelled through B, and a call held on A is approved through B, on
// every store, with A's fallback poll an hour: the notice is what carries
// them (on Redis, two clients of one real redis-server).
func TestCancelAndApproveThroughAnotherReplica(t *testing.T) {
	t.Parallel()
	for name, open := range signalStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("cancel", func(t *testing.T) {
				t.Parallel()
				p := pairOn(t, Config{}, Deps{}, noPoll, open)
				lb := startDetached(t, as("alice"), p.a, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
				id := batchIDOf(t, lb.snapshot())
				p.subscribed(t)
				if err := p.b.e.Cancel(as("alice"), id, "from B"); err != nil {
					t.Fatalf("Cancel on B: %v", err)
				}
				r := results(t, ended(t, lb, "cancelled through B"))["h"]
				if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "from B") {
					t.Errorf("result %v, want CANCELLED with B's reason", r)
				}
			})
			t.Run("approve", func(t *testing.T) {
				t.Parallel()
				p := pairOn(t, Config{Approvers: []string{"carol"}}, Deps{Admission: holdWrites}, noPoll, open)
				lb, id := startHeld(t, p.a, true)
				p.subscribed(t)
				if err := p.b.e.ResolveApproval(as("carol"), id, "w", true, "", ""); err != nil {
					t.Fatalf("ResolveApproval on B: %v", err)
				}
				if r := results(t, ended(t, lb, "approved through B"))["w"]; r.GetIsError() {
					t.Errorf("result %v, want the call run", r)
				}
			})
		})
	}
}

// deafSignals is a store's Signals whose notices are all lost: it takes
// watchers and never wakes them, and says it listens.
type deafSignals struct{}

func (deafSignals) Signal(context.Context, string) error { return nil }
func (deafSignals) Watch(string, func()) (func(), bool)  { return func() {}, true }
func (deafSignals) Listening() bool                      { return true }

// TestLostNoticesAreCoveredByTheFallbackPoll: when every notice is lost
// (A's Signals hears nothing), a cancel and an approval left through B
// still arrive, at A's fallback look.
func TestLostNoticesAreCoveredByTheFallbackPoll(t *testing.T) {
	t.Parallel()
	shared := signalStores["memory"]
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		p := pairOn(t, Config{}, Deps{Signals: deafSignals{}}, 20*time.Millisecond, shared)
		lb := startDetached(t, as("alice"), p.a, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
		if err := p.b.e.Cancel(as("alice"), batchIDOf(t, lb.snapshot()), "lost notice"); err != nil {
			t.Fatal(err)
		}
		if r := results(t, ended(t, lb, "cancelled, its notice lost"))["h"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED {
			t.Errorf("result %v, want CANCELLED", r)
		}
	})
	t.Run("approve", func(t *testing.T) {
		t.Parallel()
		p := pairOn(t, Config{Approvers: []string{"carol"}}, Deps{Admission: holdWrites, Signals: deafSignals{}}, 20*time.Millisecond, shared)
		lb, id := startHeld(t, p.a, true)
		if err := p.b.e.ResolveApproval(as("carol"), id, "w", true, "", ""); err != nil {
			t.Fatal(err)
		}
		if r := results(t, ended(t, lb, "approved, its notice lost"))["w"]; r.GetIsError() {
			t.Errorf("result %v, want the call run", r)
		}
	})
}

// TestRefusedNoticesFallBackToPolling: A's Redis user may not use the
// notices' channel (an ACL user of Redis 7 has none unless given: NOPERM),
// so A never hears a notice and B cannot send one. A's store says it is
// not listening, and A looks at its mailboxes as often as it would
// without notices (each lease renewal, every approvalPoll), not at the
// fallback poll (an hour here): a cancel and an approval through B arrive.
func TestRefusedNoticesFallBackToPolling(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	srv.Do("ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "+@all", "resetchannels")
	open := func(t *testing.T) (store.Store, store.Store) {
		a, err := redis.Open(context.Background(), "redis://nochannels:pw@"+srv.Addr+"/0", redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a, openRedis(t, srv)
	}
	refused := func(t *testing.T, p replicaPair) {
		t.Helper()
		waitFor(t, func() bool { return p.sub.FailedSubscriptions() > 0 })
		if p.sub.Listening() {
			t.Fatal("A's store says it listens, its subscription refused")
		}
	}
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		p := pairOn(t, Config{}, Deps{}, noPoll, open)
		lb := startDetached(t, as("alice"), p.a, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
		refused(t, p)
		if err := p.b.e.Cancel(as("alice"), batchIDOf(t, lb.snapshot()), "no notices"); err != nil {
			t.Fatalf("Cancel on B: %v", err)
		}
		if r := results(t, ended(t, lb, "cancelled through B without notices"))["h"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED {
			t.Errorf("result %v, want CANCELLED", r)
		}
	})
	t.Run("approve", func(t *testing.T) {
		t.Parallel()
		p := pairOn(t, Config{Approvers: []string{"carol"}}, Deps{Admission: holdWrites}, noPoll, open)
		lb, id := startHeld(t, p.a, true)
		refused(t, p)
		if err := p.b.e.ResolveApproval(as("carol"), id, "w", true, "", ""); err != nil {
			t.Fatalf("ResolveApproval on B: %v", err)
		}
		if r := results(t, ended(t, lb, "approved through B without notices"))["w"]; r.GetIsError() {
			t.Errorf("result %v, want the call run", r)
		}
	})
}

// TestCancelArrivesAcrossARedisRestart: the redis-server two replicas
// share (a real process of the test's own, persisting to its append-only
// file) restarts while A's batches wait, their fallback poll an hour.
// First a cancel whose notice is lost (B's is sent nowhere) is found once
// A has subscribed again after the restart, which makes every watcher
// look; then a cancel sent through B after a second restart arrives too.
func TestCancelArrivesAcrossARedisRestart(t *testing.T) {
	srv := testenv.StartRedis(t)
	open := func(t *testing.T) (store.Store, store.Store) { return openRedis(t, srv), openRedis(t, srv) }
	// B's notices are lost; its mailbox writes are not.
	lossy := pairOn(t, Config{}, Deps{}, noPoll, open)
	lossy.b.e.deps.Signals = deafSignals{}
	lb := startDetached(t, as("alice"), lossy.a, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
	lossy.subscribed(t)
	if err := lossy.b.e.Cancel(as("alice"), batchIDOf(t, lb.snapshot()), "before the restart"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	srv.Start()
	r := results(t, ended(t, lb, "a lost notice, then a restart"))["h"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "before the restart") {
		t.Errorf("result %v, want CANCELLED with the reason", r)
	}

	p := pairOn(t, Config{}, Deps{}, noPoll, open)
	lb = startDetached(t, as("alice"), p.a, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
	p.subscribed(t)
	srv.Stop()
	srv.Start()
	// B's first commands may meet its breaker, open from the outage, or a
	// connection the restart broke: Cancel is the client's to send again.
	var err error
	waitFor(t, func() bool {
		err = p.b.e.Cancel(as("alice"), batchIDOf(t, lb.snapshot()), "after the restart")
		return CodeOf(err) != Unavailable
	})
	if err != nil {
		t.Fatalf("Cancel on B after the restart: %v", err)
	}
	r = results(t, ended(t, lb, "cancelled after a restart"))["h"]
	if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED || !strings.Contains(text(r), "after the restart") {
		t.Errorf("result %v, want CANCELLED with the reason", r)
	}
}

// flakyVars fails its first looks at the mailboxes (a cancel, a
// decision), as a store coming back from an outage does.
type flakyVars struct {
	store.Store
	fails atomic.Int32
}

func (f *flakyVars) GetVar(ctx context.Context, scope, name string) ([]byte, bool, error) {
	if (name == "cancel" || strings.HasPrefix(name, "decision:")) && f.fails.Add(-1) >= 0 {
		return nil, false, errors.New("the store did not answer")
	}
	return f.Store.GetVar(ctx, scope, name)
}

// TestFailedLookIsTakenAgain: when the look a notice wakes fails (the
// store did not answer), the owner looks again soon (at its next lease
// renewal, or approvalPoll), not at its fallback poll an hour away.
func TestFailedLookIsTakenAgain(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"cancel", "approve"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			m := memory.New(memory.Options{})
			t.Cleanup(func() { m.Close() })
			flaky := &flakyVars{Store: m}
			flaky.fails.Store(2)
			cfg := Config{Approvers: []string{"carol"}}
			deps := Deps{Idempotency: m, EventLog: m, Signals: m, Admission: holdWrites}
			da, db := deps, deps
			da.Vars, da.Replica = flaky, "a"
			db.Vars, db.Replica = m, "b"
			a, b := newTestBedWith(t, cfg, da), newTestBedWith(t, cfg, db)
			a.e.fallbackPoll = noPoll
			if kind == "cancel" {
				lb := startDetached(t, as("alice"), a, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("h", "hold", "")}})
				if err := b.e.Cancel(as("alice"), batchIDOf(t, lb.snapshot()), "look again"); err != nil {
					t.Fatal(err)
				}
				if r := results(t, ended(t, lb, "cancelled, its first look failed"))["h"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_CANCELLED {
					t.Errorf("result %v, want CANCELLED", r)
				}
				return
			}
			lb, id := startHeld(t, a, true)
			if err := b.e.ResolveApproval(as("carol"), id, "w", true, "", ""); err != nil {
				t.Fatal(err)
			}
			if r := results(t, ended(t, lb, "approved, its first look failed"))["w"]; r.GetIsError() {
				t.Errorf("result %v, want the call run", r)
			}
		})
	}
}
