package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A Redis Cluster is named by redis+cluster:// (rediss+cluster:// for TLS)
// and a list of seed nodes: redis+cluster://[user:pass@]host:port,host:port
// [?query]. The client (go-redis's ClusterClient) learns the rest of the
// cluster from them, so one live seed is enough to start.
//
// Which of go-redis's cluster retries a store keeps:
//
//   - MOVED and ASK are followed (MaxRedirects, go-redis's default 3, or the
//     URL's max_redirects), and so are CLUSTERDOWN, TRYAGAIN, LOADING and
//     READONLY (a master turned replica by a failover): each is the server's
//     word that it did not run the command, so sending it elsewhere cannot
//     run it twice.
//   - A connection that could not be made (dial) is tried again: nothing was
//     sent.
//   - A command that was written and got no answer (a timeout, a connection
//     reset or closed) is never sent again: it may have run, and a script
//     run twice appends an event twice or takes a rate twice. go-redis would
//     resend it to the same node and then another; nodeGuard stops that,
//     as MaxRetries -1 does for a single Redis. The caller, which knows
//     whether the operation may be repeated, decides.
//
// TRYAGAIN is the one of these that can last: a slot being moved to
// another master (redis-cli --cluster reshard, rebalance) answers it to
// every script whose keys are not all on one side, for as long as the
// slot's keys take to move — and the store's scripts name keys that are
// often absent (a new record's, a new log's, the lease of a completed
// record or a finished log). go-redis sends a command 4 times within
// about 100 ms and gives up, so every new keyed call, detached batch and
// read of a finished batch in that slot failed while it moved. slotMoves
// sends it again, backing off, until the slot has moved, for as long as
// the operation's context allows and at most tryAgainFor.
//
// Each node has a breaker of its own (nodeGuard): a dead master fails its
// own slots' commands at once while the other masters' are served. A node
// that does not answer also makes the client reload the cluster's layout
// (CLUSTER SLOTS), so that a replica promoted in a dead master's place is
// used as soon as the cluster has promoted it: a dead master answers no
// MOVED, and go-redis would otherwise learn of the change only on its
// periodic reload (every 60 s).

// Schemes of a cluster's URL.
const (
	clusterScheme    = "redis+cluster"
	clusterTLSScheme = "rediss+cluster"
)

// IsClusterURL tells whether url names a Redis Cluster.
func IsClusterURL(url string) bool {
	scheme, _, _ := strings.Cut(url, "://")
	return scheme == clusterScheme || scheme == clusterTLSScheme
}

// ParseClusterURL reads redis+cluster://[user:pass@]host:port[,host:port…][/0][?query]
// (rediss+cluster:// for TLS) into go-redis's cluster options, with the
// store's defaults for what the query does not set. The query takes
// go-redis's cluster parameters (read_timeout, max_redirects, …); a path
// may only name database 0, the one database a cluster has.
func ParseClusterURL(url string) (*goredis.ClusterOptions, error) {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok || (scheme != clusterScheme && scheme != clusterTLSScheme) {
		return nil, fmt.Errorf("not a cluster URL: want %s://host:port,host:port,…", clusterScheme)
	}
	auth, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		auth, tail = rest[:i], rest[i:]
	}
	user, hosts := "", auth
	if i := strings.LastIndex(auth, "@"); i >= 0 {
		user, hosts = auth[:i+1], auth[i+1:]
	}
	if hosts == "" {
		return nil, fmt.Errorf("%s://: no nodes; want %s://host:port,host:port,…", scheme, scheme)
	}
	var addrs []string
	for _, a := range strings.Split(hosts, ",") {
		h, p, err := net.SplitHostPort(a)
		if err != nil || h == "" {
			return nil, fmt.Errorf("%s://: node %q: want host:port", scheme, a)
		}
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%s://: node %q: the port must be a number from 1 to 65535", scheme, a)
		}
		addrs = append(addrs, a)
	}
	// The rest is an ordinary URL on the first node, which go-redis reads.
	u, err := neturl.Parse(strings.TrimSuffix(scheme, "+cluster") + "://" + user + addrs[0] + tail)
	if err != nil {
		return nil, err
	}
	switch strings.Trim(u.Path, "/") {
	case "", "0":
	default:
		return nil, fmt.Errorf("%s://: path %q: a cluster has one database, 0", scheme, u.Path)
	}
	u.Path, u.RawPath, u.Fragment = "", "", ""
	q := u.Query()
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u.RawQuery = q.Encode()
	o, err := goredis.ParseClusterURL(u.String())
	if err != nil {
		return nil, err
	}
	setClusterDefaults(o, q)
	return o, nil
}

// setClusterDefaults gives a cluster's client the timeouts setDefaults
// gives a single Redis's, for the same reasons. MaxRetries is per node:
// go-redis's cluster default, -1, is kept unless the URL sets it.
func setClusterDefaults(o *goredis.ClusterOptions, q neturl.Values) {
	o.ContextTimeoutEnabled = true
	if !q.Has("read_timeout") {
		o.ReadTimeout = defaultReadTimeout
	}
	if !q.Has("write_timeout") {
		o.WriteTimeout = o.ReadTimeout
	}
	if !q.Has("dial_timeout") {
		o.DialTimeout = defaultDialTimeout
	}
	if !q.Has("pool_timeout") {
		o.PoolTimeout = o.ReadTimeout
	}
	if !q.Has("max_retries") {
		o.MaxRetries = -1
	}
}

// openCluster makes the client of the cluster url names, each node guarded
// as the package's comment says.
func openCluster(ctx context.Context, url string, opts Options, failures int) (*goredis.ClusterClient, error) {
	o, err := ParseClusterURL(url)
	if err != nil {
		return nil, err
	}
	if o.TLSConfig, err = withTLS(o.TLSConfig, opts.TLS, opts.CAs); err != nil {
		return nil, err
	}
	if o.Addrs, err = seedsWithSlots(ctx, o); err != nil {
		return nil, err
	}
	c := goredis.NewClusterClient(o)
	c.AddHook(slotMoves{})
	// A node is its address: go-redis may make another client for one it
	// had (a layout reloaded, a client closed and made again), and that
	// client must find the node's breaker as it was, open or not.
	var mu sync.Mutex
	breakers := map[string]*breaker{}
	c.OnNewNode(func(node *goredis.Client) {
		g := &nodeGuard{reload: func() { c.ReloadState(context.Background()) }}
		if failures > 0 {
			addr := node.Options().Addr
			mu.Lock()
			if breakers[addr] == nil {
				breakers[addr] = newBreaker(failures, opts.BreakerCooldown)
			}
			g.breaker = breakers[addr]
			mu.Unlock()
		}
		node.AddHook(g)
	})
	return c, nil
}

// seedsWithSlots returns o's seed nodes less those that answer CLUSTER
// SLOTS with no slot at all. go-redis takes the cluster's layout from the
// first seed, picked at random, that answers CLUSTER SLOTS, and a node of
// no cluster answers it so: one removed with redis-cli --cluster
// del-node (which resets it and leaves it running) or not yet joined.
// With such a seed in the URL beside live ones, Open failed at random
// ("redis: cluster has no nodes"). A seed that does not answer, or
// answers an error, is kept: go-redis tries it and says what it got.
func seedsWithSlots(ctx context.Context, o *goredis.ClusterOptions) ([]string, error) {
	slotless := make([]bool, len(o.Addrs))
	var wg sync.WaitGroup
	for i, addr := range o.Addrs {
		wg.Go(func() {
			c := goredis.NewClient(&goredis.Options{
				Addr: addr, ClientName: o.ClientName, Dialer: o.Dialer, OnConnect: o.OnConnect, Protocol: o.Protocol,
				Username: o.Username, Password: o.Password,
				CredentialsProvider: o.CredentialsProvider, CredentialsProviderContext: o.CredentialsProviderContext,
				MaxRetries: -1, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
				ContextTimeoutEnabled: true, TLSConfig: o.TLSConfig, PoolSize: 1,
			})
			defer c.Close()
			slots, err := c.ClusterSlots(ctx).Result()
			slotless[i] = err == nil && len(slots) == 0
		})
	}
	wg.Wait()
	var keep, dropped []string
	for i, addr := range o.Addrs {
		if slotless[i] {
			dropped = append(dropped, addr)
		} else {
			keep = append(keep, addr)
		}
	}
	if len(keep) == 0 {
		return nil, fmt.Errorf("no seed node serves a slot (%s answered CLUSTER SLOTS with none: a node removed from the cluster, or not joined to one); name nodes of the cluster", strings.Join(dropped, ", "))
	}
	return keep, nil
}

// lostAnswer is the error of a command that was sent and got no answer,
// so whether it ran is unknown. It does not unwrap to the network error
// under it, so go-redis's cluster client does not take it for one it may
// send again; context errors still match errors.Is.
type lostAnswer struct{ err error }

func (e *lostAnswer) Error() string {
	return "no answer, so whether the command ran is unknown (it is not sent again): " + e.err.Error()
}

func (e *lostAnswer) Is(target error) bool {
	return (target == context.DeadlineExceeded || target == context.Canceled) && errors.Is(e.err, target)
}

// noAnswer is unanswered, also for a lostAnswer: a command's error can be
// another's lost answer (the handshake of the connection it was to use).
func noAnswer(err error) bool {
	var la *lostAnswer
	return errors.As(err, &la) || unanswered(err)
}

// maybeSent tells whether a command that failed with err may have reached
// the server: anything but a connection never made.
func maybeSent(err error) bool {
	var op *net.OpError
	return !(errors.As(err, &op) && op.Op == "dial")
}

// nodeGuard is the hook on each node's client of a cluster: its breaker,
// the layout's reload when the node does not answer, and the rule that a
// command whose answer was lost is not sent again.
type nodeGuard struct {
	breaker *breaker // nil: none
	reload  func()
}

var _ goredis.Hook = (*nodeGuard)(nil)

// DialHook implements goredis.Hook.
func (g *nodeGuard) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// admit tells whether cmds may go to the node now: not when one of them
// already lost its answer (this is go-redis resending it) or the breaker
// is open. It returns the error to give them when not.
func (g *nodeGuard) admit(ctx context.Context, cmds ...goredis.Cmder) (probe bool, err error) {
	for _, c := range cmds {
		var la *lostAnswer
		if errors.As(c.Err(), &la) {
			return false, la
		}
	}
	if g.breaker == nil || g.breaker.nested(ctx) {
		return false, nil
	}
	ok, probe := g.breaker.allow()
	if !ok {
		g.reload()
		return false, errOpen
	}
	return probe, nil
}

// within marks ctx as a command g's breaker let through (breaker.within).
func (g *nodeGuard) within(ctx context.Context) context.Context {
	if g.breaker == nil {
		return ctx
	}
	return g.breaker.within(ctx)
}

// settle records the outcome and makes a lost answer final.
func (g *nodeGuard) settle(err error, probe bool, cmds ...goredis.Cmder) error {
	if g.breaker != nil {
		raw := err
		if la := (*lostAnswer)(nil); errors.As(err, &la) {
			raw = la.err // the breaker judges the failure under it
		}
		g.breaker.done(raw, probe)
	}
	if !noAnswer(err) {
		return err
	}
	// CLUSTER SLOTS is the reload's own command: a node that does not
	// answer it must not start another reload.
	if len(cmds) != 1 || cmds[0].Name() != "cluster" {
		g.reload()
	}
	var la *lostAnswer
	if errors.As(err, &la) || !maybeSent(err) || errors.Is(err, context.Canceled) {
		return err
	}
	for _, c := range cmds {
		if ce := c.Err(); ce != nil && unanswered(ce) && maybeSent(ce) && !errors.As(ce, &la) {
			c.SetErr(&lostAnswer{ce})
		}
	}
	return &lostAnswer{err}
}

// ProcessHook implements goredis.Hook.
func (g *nodeGuard) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if g.breaker != nil && g.breaker.nested(ctx) { // a handshake: see breaker.within
			return next(ctx, cmd)
		}
		probe, err := g.admit(ctx, cmd)
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		return g.settle(next(g.within(ctx), cmd), probe, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook. go-redis decides to resend
// a pipeline's commands before this hook sees their errors, so the resend
// is refused when it comes back through admit.
func (g *nodeGuard) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if g.breaker != nil && g.breaker.nested(ctx) { // a handshake: see breaker.within
			return next(ctx, cmds)
		}
		probe, err := g.admit(ctx, cmds...)
		if err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return g.settle(next(g.within(ctx), cmds), probe, cmds...)
	}
}

// How slotMoves sends a command answered TRYAGAIN again: backing off from
// tryAgainMin to tryAgainMax, for at most tryAgainFor (sooner when the
// operation's context ends). A slot of toolwire's small keys moves in
// milliseconds; one that moves for longer (millions of keys in it, or a
// reshard stopped halfway, which redis-cli --cluster fix finishes) fails
// the operation with an error that says so.
const (
	tryAgainMin = 10 * time.Millisecond
	tryAgainMax = 250 * time.Millisecond
	tryAgainFor = 5 * time.Second
)

// slotMoves is the cluster client's hook that sends a command answered
// TRYAGAIN again (see the package's comment on retries). TRYAGAIN is the
// server's word that it did not run the command, so sending it again
// cannot run it twice.
type slotMoves struct{}

var _ goredis.Hook = slotMoves{}

// DialHook implements goredis.Hook.
func (slotMoves) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (slotMoves) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if !moving(err) {
			return err
		}
		giveUp := time.Now().Add(tryAgainFor)
		for wait := tryAgainMin; ; wait = min(2*wait, tryAgainMax) {
			if time.Now().Add(wait).After(giveUp) {
				return &movingSlot{err: err}
			}
			if dl, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(dl) {
				return &movingSlot{err: err, ended: context.DeadlineExceeded}
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return &movingSlot{err: err, ended: ctx.Err()}
			case <-t.C:
			}
			cmd.SetErr(nil)
			if err = next(ctx, cmd); !moving(err) {
				return err
			}
		}
	}
}

// moving tells whether err is a server's answer that a slot is moving:
// TRYAGAIN, or the MOVED or ASK that go-redis gives back when the slot
// changed hands again while it followed the redirects it may
// (MaxRedirects). In each the server did not run the command.
func moving(err error) bool {
	if goredis.IsTryAgainError(err) {
		return true
	}
	_, moved := goredis.IsMovedError(err)
	_, ask := goredis.IsAskError(err)
	return moved || ask
}

// ProcessPipelineHook implements goredis.Hook. The store's one pipeline,
// RenewLogs's, is left to go-redis's own redirects: a renewal still
// refused is sent again at its caller's next tick.
func (slotMoves) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// movingSlot is the error of a command still answered TRYAGAIN (or
// redirected) when slotMoves gave up: past tryAgainFor, or when its
// context ended (ended, which errors.Is matches, as the context's own
// error would).
type movingSlot struct {
	err   error
	ended error // the context's error; nil: tryAgainFor passed
}

func (e *movingSlot) Error() string {
	return "the cluster is moving this key's slot to another master and still answers TRYAGAIN (a reshard; one left halfway needs redis-cli --cluster fix): " + e.err.Error()
}

func (e *movingSlot) Unwrap() error { return e.err }

func (e *movingSlot) Is(target error) bool { return e.ended != nil && target == e.ended }
