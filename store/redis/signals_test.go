package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/store/storetest"
)

// openAt opens a store (a replica's client) at url with prefix, closed
// when the test ends.
func openAt(t *testing.T, url, prefix string) *redis.Store {
	t.Helper()
	s, err := redis.Open(context.Background(), url, redis.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// wakes watches topic on s until the test ends and returns the channel
// its wakes land on (a wake finding it full is dropped: one is pending).
func wakes(t *testing.T, s *redis.Store, topic string) chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 16)
	stop, ok := s.Watch(topic, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	if !ok {
		t.Fatal("Watch refused a watcher")
	}
	t.Cleanup(stop)
	return ch
}

// woke waits for a wake on ch, failing the test with what at its deadline.
func woke(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-t.Context().Done():
		t.Fatal(what)
	}
}

// drainWakes drops the wakes pending on ch.
func drainWakes(ch chan struct{}) {
	for len(ch) > 0 {
		<-ch
	}
}

// TestSignalsAcrossARestart: the notices' contract on a redis-server of the
// test's own, which it restarts (SIGTERM, then a new process on the same
// port) while a watcher waits: the store subscribes again and wakes its
// watchers, since what was sent meanwhile is lost, and notices reach them
// again.
func TestSignalsAcrossARestart(t *testing.T) {
	srv := testenv.StartRedis(t)
	var n int
	storetest.Signals(t, func(t *testing.T) (*redis.Store, *redis.Store) {
		n++
		prefix := fmt.Sprintf("r%d:", n)
		return openAt(t, srv.URL(), prefix), openAt(t, srv.URL(), prefix)
	}, storetest.WithRestart(func() { srv.Stop(); srv.Start() }))
}

// TestSignalsSharded: on Redis 7 the notices go over sharded pub/sub
// (SPUBLISH, SSUBSCRIBE), which a cluster keeps on one shard: a plain
// SUBSCRIBE to the channel hears nothing of them, a SSUBSCRIBE does.
func TestSignalsSharded(t *testing.T) {
	addr := testenv.RedisAddr(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("sharded%d:", time.Now().UnixNano())
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	plain := c.Subscribe(ctx, prefix+"signals")
	defer plain.Close()
	sharded := c.SSubscribe(ctx, prefix+"signals")
	defer sharded.Close()
	for _, ps := range []*goredis.PubSub{plain, sharded} {
		if _, err := ps.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
	}
	s := openAt(t, "redis://"+addr+"/0", prefix)
	if err := s.Signal(ctx, "batch:x"); err != nil {
		t.Fatal(err)
	}
	m, err := sharded.ReceiveMessage(ctx)
	if err != nil || m.Payload != "batch:x" {
		t.Fatalf("SSUBSCRIBE got %v, %v; want the notice batch:x", m, err)
	}
	// Sent after the sharded notice, a plain one arrives first on the
	// plain subscription unless the store sent its notice plainly too.
	if err := c.Publish(ctx, prefix+"signals", "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if m, err := plain.ReceiveMessage(ctx); err != nil || m.Payload != "marker" {
		t.Fatalf("SUBSCRIBE got %v, %v; want only the marker (the notice went over sharded pub/sub)", m, err)
	}
}

// TestSignalsSurviveAFrozenRedis: a server that stops answering without
// closing its connections (SIGSTOP) is noticed by the subscription's
// health check (a PING unanswered), which drops it; once the server
// answers again the store subscribes again, wakes its watchers, and
// notices reach them.
func TestSignalsSurviveAFrozenRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	a, b := openAt(t, srv.URL(), "f:"), openAt(t, srv.URL(), "f:")
	ctx := context.Background()
	woken := wakes(t, b, "batch:x")
	woke(t, woken, "the watcher was not woken when the subscription was made")
	srv.Freeze()
	// Wait for the health check to give the subscription up: a state the
	// store reports, not a time.
	for {
		if _, why := b.Subscriptions(); why != "" {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatal("the subscription to a frozen server was never given up")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if b.Listening() {
		t.Error("Listening is true with the subscription given up")
	}
	srv.Thaw()
	woke(t, woken, "the watcher was not woken once the server answered again")
	if n, _ := b.Subscriptions(); n < 2 || !b.Listening() {
		t.Fatalf("%d subscriptions established, listening %v; want a second after the freeze, listening", n, b.Listening())
	}
	drainWakes(woken)
	if err := a.Signal(ctx, "batch:x"); err != nil {
		t.Fatal(err)
	}
	woke(t, woken, "a notice after the freeze did not arrive")
}

// TestSignalsRefusedByTheServer: a Redis user without permission for the
// notices' channel (Redis 7 gives an ACL user none unless told:
// acl-pubsub-default is resetchannels) cannot subscribe or publish. The
// store says it is not listening, so that its watchers poll as they would
// without notices, and the reason is the server's NOPERM; once the user
// is given the channel, it subscribes, listens and hears notices.
func TestSignalsRefusedByTheServer(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.Do("ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "+@all", "resetchannels")
	a := openAt(t, srv.URL(), "acl:")
	b := openAt(t, "redis://nochannels:pw@"+srv.Addr+"/0", "acl:")
	ctx := context.Background()
	woken := wakes(t, b, "batch:x")
	for b.FailedSubscriptions() < 2 {
		select {
		case <-t.Context().Done():
			t.Fatal("the store never tried to subscribe twice")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n, why := b.Subscriptions(); n != 0 || !strings.Contains(why, "NOPERM") || b.Listening() {
		t.Fatalf("after %d refused subscriptions: %d established, listening %v, last error %q; want none, not listening, NOPERM", b.FailedSubscriptions(), n, b.Listening(), why)
	}
	if err := b.Signal(ctx, "batch:x"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Signal by a user without the channel: %v, want NOPERM", err)
	}

	srv.Do("ACL", "SETUSER", "nochannels", "allchannels")
	for !b.Listening() {
		select {
		case <-t.Context().Done():
			t.Fatal("given the channel, the store never listened")
		case <-time.After(10 * time.Millisecond):
		}
	}
	woke(t, woken, "the watcher was not woken when the subscription was made")
	drainWakes(woken)
	if err := a.Signal(ctx, "batch:x"); err != nil {
		t.Fatal(err)
	}
	woke(t, woken, "a notice did not arrive once the user had the channel")
}
