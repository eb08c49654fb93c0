package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
)

// TestSignalsAcrossAClusterFailover: on a Redis Cluster of the test's own
// (3 masters, 3 replicas), notices keep reaching a watcher on another
// handle through a failover of the master serving their channel:
//
//   - graceful: CLUSTER FAILOVER on its replica; the old master turns
//     replica and ends its sharded subscriptions;
//   - freeze: the master stops answering (SIGSTOP) without closing its
//     connections, the subscription's health check gives it up, and the
//     cluster promotes its replica;
//   - crash: the master, which holds the watcher's subscription, is killed
//     (SIGKILL) and the cluster promotes its replica.
//
// Each time the store subscribes again and wakes its watchers once
// (notices sent meanwhile are lost), and a notice published afterwards
// reaches the watcher as a notice of its own topic, not a wake-everyone.
// After the crash the store learns the cluster's new layout as soon as an
// attempt fails: once the cluster has promoted the replica, at most the
// attempts already under way fail (go-redis alone would go on dialling the
// dead node until its own periodic reload, a minute on this cluster).
func TestSignalsAcrossAClusterFailover(t *testing.T) {
	cl := testenv.StartRedisCluster(t)
	for _, tc := range []struct {
		name string
		fail func(master *testenv.RedisNode, watcher *redis.Store)
	}{
		{"graceful", func(m *testenv.RedisNode, _ *redis.Store) { cl.Failover(t, m) }},
		{"freeze", func(m *testenv.RedisNode, w *redis.Store) {
			// Frozen until the subscription's health check has given it up
			// (a PING unanswered: a state the store reports, not a time;
			// a promotion quicker than the check would leave the
			// subscription on the old master, turned replica, which still
			// passes notices on), then let go on once its replica is
			// promoted: it turns replica, and its shard keeps one for the
			// crash.
			m.Freeze()
			for deadline := testenv.Deadline(t); ; time.Sleep(50 * time.Millisecond) {
				if _, why := w.Subscriptions(); why != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the subscription to a frozen master was never given up")
				}
			}
			cl.WaitFailover(t, m)
			m.Thaw()
		}},
		{"crash", func(m *testenv.RedisNode, _ *redis.Store) { m.Kill(); cl.WaitFailover(t, m) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := tc.name + ":"
			a, b := openAt(t, cl.URL(), prefix), openAt(t, cl.URL(), prefix)
			x, y := watchTopic(t, b, "batch:x"), watchTopic(t, b, "batch:y")
			x.wait(t, "the first subscription", b)
			noticeReaches(t, a, x, y)

			channel := prefix + "signals"
			master := cl.MasterOf(t, channel)
			if n := shardSubscribers(t, master, channel); n != 1 {
				t.Fatalf("%s has %d subscribers of %s, want the watcher's", master.Addr, n, channel)
			}
			before, _ := b.Subscriptions()
			x.drain()
			tc.fail(master, b)
			failed := b.FailedSubscriptions()
			x.wait(t, "the wake after the failover", b)
			if n, why := b.Subscriptions(); n <= before {
				t.Fatalf("%d subscriptions established (%d before the failover; last error %q); want a new one", n, before, why)
			}
			if n := b.FailedSubscriptions() - failed; n > 3 {
				t.Errorf("%d attempts to subscribe failed after the cluster had a new master: the store went on asking the old one", n)
			}
			noticeReaches(t, a, x, y)
		})
	}
}

// shardSubscribers returns how many subscribers node has of the sharded
// channel (PUBSUB SHARDNUMSUB).
func shardSubscribers(t *testing.T, node *testenv.RedisNode, channel string) int64 {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: node.Addr})
	defer c.Close()
	n, err := c.PubSubShardNumSub(context.Background(), channel).Result()
	if err != nil {
		t.Fatalf("%s: PUBSUB SHARDNUMSUB: %v", node.Addr, err)
	}
	return n[channel]
}

// topicWatch counts the wakes of one watcher.
type topicWatch struct{ woken chan struct{} }

func watchTopic(t *testing.T, s *redis.Store, topic string) *topicWatch {
	w := &topicWatch{woken: make(chan struct{}, 64)}
	stop, ok := s.Watch(topic, func() {
		select {
		case w.woken <- struct{}{}:
		default:
		}
	})
	if !ok {
		t.Fatal("the store does not watch")
	}
	t.Cleanup(stop)
	return w
}

func (w *topicWatch) drain() {
	for len(w.woken) > 0 {
		<-w.woken
	}
}

// wait waits for a wake, until just before the test's deadline; s is the
// watcher's store, whose subscriptions a failure reports.
func (w *topicWatch) wait(t *testing.T, what string, s *redis.Store) {
	t.Helper()
	select {
	case <-w.woken:
	case <-time.After(time.Until(testenv.Deadline(t))):
		n, why := s.Subscriptions()
		t.Fatalf("%s: the watcher was never woken (%d subscriptions, last error %q)", what, n, why)
	}
}

// noticeReaches publishes x's topic through a until a round in which x is
// woken and y is not: a notice delivered, not a wake-everyone (which a
// subscription being made again sends, and then would come to y too).
// Publishing may fail while the cluster settles; the rounds go on until
// just before the test's deadline.
func noticeReaches(t *testing.T, a *redis.Store, x, y *topicWatch) {
	t.Helper()
	deadline := testenv.Deadline(t)
	var last error
	for time.Now().Before(deadline) {
		x.drain()
		y.drain()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		last = a.Signal(ctx, "batch:x")
		cancel()
		if last != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		select {
		case <-x.woken:
			// A wake-everyone reaches y too, within the same hand-out.
			time.Sleep(20 * time.Millisecond)
			if len(y.woken) == 0 {
				return
			}
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatalf("no notice of batch:x alone reached its watcher (last publish: %v)", last)
}
