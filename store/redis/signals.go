package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/internal/fanout"
)

// Signals go over Redis pub/sub: Signal publishes the topic on one
// channel per prefix ("<prefix>signals"), and each Store that watches
// anything holds one subscription to it (one per replica, however many
// batches it waits on), handing each notice to the watchers of its topic
// in this process (fanout.Hub). Every replica receives every notice and
// drops those nobody watches: notices are as rare as people's cancels and
// approvals, and this way a replica that writes a mailbox need not know
// which replica owns it.
//
// Sharded pub/sub (SPUBLISH, SSUBSCRIBE: Redis 7.0 and later), because in
// a Redis Cluster a plain PUBLISH is broadcast to every node of the
// cluster, while a sharded one stays on the shard that owns the channel's
// slot, where the subscribers are; on one server the two are alike. A
// server that does not know the sharded commands (before 7.0) answers
// "unknown command", and the store then uses PUBLISH and SUBSCRIBE for the
// rest of its life.
//
// Pub/sub delivers at most once: a notice published while a subscription
// is down is lost. So the subscription is watched (a PING after a second
// of silence, answered within answerWithin, or it is dropped and made
// again), and every time it is (re)established every watcher is woken,
// to look at its mailbox once. Blocking reads of a stream (XREAD BLOCK)
// would keep notices across a reconnect, but need a key per replica or a
// stream everyone trims, and still a look after a restart that lost it;
// the mailbox already is the record, so the notice need only be a hint.
//
// The subscription goes through the store's breaker (Open's): while it is
// open, no subscription is attempted; each attempt counts as a command's
// answer or failure. Nothing a batch does waits for it: Watch only
// registers in this process, and Signal is one command with its caller's
// deadline.

// signalChannel follows the store's prefix to name the notices' channel.
const signalChannel = "signals"

// How the subscription is watched and made again.
const (
	healthEvery  = time.Second           // a PING after this long without a message
	answerWithin = 2 * time.Second       // for the PING's answer, and a subscription's confirmation
	retryMin     = 50 * time.Millisecond // the first wait before subscribing again
	retryMax     = 2 * time.Second       // the longest
	unsubscribed = "the server ended the subscription"
)

// signaller is a Store's side of the notices: its watchers and its one
// subscription, started by the first Watch and ended by Close.
type signaller struct {
	hub     fanout.Hub
	breaker *breaker    // Open's; nil for New's
	plain   atomic.Bool // the server knows no sharded pub/sub

	mu        sync.Mutex
	started   bool
	closed    bool
	stop      chan struct{}
	done      chan struct{}
	ps        *goredis.PubSub // the subscription being made or held, for close to break
	live      atomic.Bool     // a subscription is established: Listening
	resubs    atomic.Int64    // subscriptions established, for tests
	failures  atomic.Int64    // attempts to subscribe that failed, for tests
	lastError atomic.Value    // string: why the last subscription ended or failed
}

// Signal implements store.Signals: it publishes topic on the store's
// channel.
func (s *Store) Signal(ctx context.Context, topic string) error {
	ch := s.prefix + signalChannel
	if !s.sig.plain.Load() {
		err := s.c.SPublish(ctx, ch, topic).Err()
		if err == nil {
			return nil
		}
		if !unknownCommand(err) {
			return fmt.Errorf("redis store: signal: %w", err)
		}
		s.sig.plain.Store(true)
	}
	if err := s.c.Publish(ctx, ch, topic).Err(); err != nil {
		return fmt.Errorf("redis store: signal: %w", err)
	}
	return nil
}

// Watch implements store.Signals. The first watcher starts the store's
// subscription; until it is established, and whenever it is again, every
// watcher is woken.
func (s *Store) Watch(topic string, wake func()) (stop func(), ok bool) {
	stop, ok = s.sig.hub.Watch(topic, wake)
	if ok {
		s.sig.start(s)
	}
	return stop, ok
}

// Listening implements store.Signals: true while the store's subscription
// to its notices is established. It is not before the first Watch, nor
// while the server refuses it (a user without permission for the
// channel, NOPERM: Redis 7's ACL users have none unless given; a proxy
// that does not carry pub/sub), nor while it is made again.
func (s *Store) Listening() bool { return s.sig.live.Load() }

// Subscriptions returns how many times the store's subscription to its
// notices has been established, and why the last one ended or failed
// ("" if none did); for tests and diagnostics.
func (s *Store) Subscriptions() (int64, string) {
	why, _ := s.sig.lastError.Load().(string)
	return s.sig.resubs.Load(), why
}

// FailedSubscriptions returns how many attempts to subscribe to the
// store's notices have failed; for tests and diagnostics.
func (s *Store) FailedSubscriptions() int64 { return s.sig.failures.Load() }

func (g *signaller) start(s *Store) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started || g.closed {
		return
	}
	g.started = true
	g.stop = make(chan struct{})
	g.done = make(chan struct{})
	go g.run(s)
}

// close ends the subscription and drops the watchers.
func (g *signaller) close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	started, ps := g.started, g.ps
	if started {
		close(g.stop)
	}
	g.mu.Unlock()
	if ps != nil {
		ps.Close() // breaks a Receive in progress
	}
	if started {
		<-g.done
	}
	g.hub.Close()
}

// run holds the subscription, making it again whenever it fails, until
// close.
func (g *signaller) run(s *Store) {
	defer close(g.done)
	wait := retryMin
	for {
		probe := false
		ok := true
		if g.breaker != nil {
			ok, probe = g.breaker.allow()
		}
		var err error
		if ok {
			var ps *goredis.PubSub
			ps, err = g.subscribe(s)
			if g.breaker != nil {
				g.breaker.done(err, probe)
			}
			if err != nil {
				g.failures.Add(1)
			}
			if err == nil {
				g.resubs.Add(1)
				g.live.Store(true)
				// Notices sent while there was no subscription are lost:
				// everyone looks once.
				g.hub.WakeAll()
				wait = retryMin
				err = g.listen(ps)
				g.live.Store(false)
			}
			if ps != nil {
				ps.Close()
			}
			g.mu.Lock()
			g.ps = nil
			g.mu.Unlock()
			if err != nil {
				g.lastError.Store(err.Error())
				reloadSlots(s.c)
			}
		}
		if unknownCommand(err) && !g.plain.Load() {
			g.plain.Store(true)
			continue // at once, with SUBSCRIBE
		}
		select {
		case <-g.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

// subscribe makes the subscription and waits for the server to confirm
// it.
func (g *signaller) subscribe(s *Store) (*goredis.PubSub, error) {
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	ch := s.prefix + signalChannel
	sharded := !g.plain.Load()
	var ps *goredis.PubSub
	if sharded {
		ps = s.c.SSubscribe(ctx)
	} else {
		ps = s.c.Subscribe(ctx)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ps, store.ErrClosed
	}
	g.ps = ps
	g.mu.Unlock()
	var err error
	if sharded {
		err = ps.SSubscribe(ctx, ch)
	} else {
		err = ps.Subscribe(ctx, ch)
	}
	if err != nil {
		return ps, err
	}
	msg, err := ps.ReceiveTimeout(ctx, answerWithin)
	if err != nil {
		return ps, err
	}
	if sub, ok := msg.(*goredis.Subscription); !ok || sub.Channel != ch || !strings.HasSuffix(sub.Kind, "subscribe") || strings.HasSuffix(sub.Kind, "unsubscribe") {
		return ps, fmt.Errorf("redis store: subscribing to %s: the server answered %v", ch, msg)
	}
	return ps, nil
}

// listen hands the subscription's notices to the watchers until it fails:
// an error, a server that ends it (a cluster's slot moved), or no answer
// to a PING within answerWithin.
func (g *signaller) listen(ps *goredis.PubSub) error {
	pinged := false
	for {
		wait := healthEvery
		if pinged {
			wait = answerWithin
		}
		msg, err := ps.ReceiveTimeout(context.Background(), wait)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
				err = ps.Ping(ctx)
				cancel()
				if err != nil {
					return err
				}
				pinged = true
				continue
			}
			return err
		}
		pinged = false
		switch m := msg.(type) {
		case *goredis.Message:
			g.hub.Wake(m.Payload)
		case *goredis.Subscription:
			if strings.HasSuffix(m.Kind, "unsubscribe") {
				return errors.New(unsubscribed)
			}
		}
	}
}

// reloadSlots has a cluster client learn the cluster's slots again, in
// the background, after a subscription failed or ended: go-redis learns
// them again when a command is answered MOVED or its node fails, but not
// when a subscription's does, and until then it would subscribe again, and
// again, on the node that is gone (a minute on the test cluster) while
// the notices go to its replica, promoted.
func reloadSlots(c goredis.UniversalClient) {
	if cc, ok := c.(*goredis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// unknownCommand tells whether err is the server's answer to a command it
// does not know.
func unknownCommand(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}
