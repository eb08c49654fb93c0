package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// What Open checks of the server before the store is used: that it lets
// the store write (probeWrites), whether it may evict the store's keys,
// whether its TLS checks a certificate (Warnings), and how long a
// cluster's failover takes (FailoverTime).
//
// A Redis with a memory limit and an eviction policy other than
// noeviction deletes keys when it is full: every policy but noeviction
// may take toolwire's, which all carry a TTL (volatile-*) and are keys
// (allkeys-*). An evicted idempotency record lets a keyed call resent
// run again; an evicted log ends a detached batch as lost; an evicted
// mailbox loses a cancel. Managed Redis services often default to
// volatile-lru, so Open looks (INFO memory, on every master of a
// cluster) and the store reports it for the operator to read in the log.

// evictionWarnings returns a warning per server of c that may evict keys;
// none for a server that hides INFO (a renamed command, an ACL): nothing
// is known of it.
func evictionWarnings(ctx context.Context, c goredis.UniversalClient) []string {
	var (
		mu       sync.Mutex
		warnings []string
	)
	look := func(ctx context.Context, c *goredis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return nil
		}
		if w := evictionWarning(c.Options().Addr, info); w != "" {
			mu.Lock()
			warnings = append(warnings, w)
			mu.Unlock()
		}
		return nil
	}
	switch c := c.(type) {
	case *goredis.ClusterClient:
		_ = c.ForEachMaster(ctx, look)
	case *goredis.Client:
		_ = look(ctx, c)
	}
	slices.Sort(warnings)
	return warnings
}

// evictionWarning is the warning for the server at addr whose INFO memory
// is info, or "" when it does not evict: no memory limit, or noeviction.
func evictionWarning(addr, info string) string {
	field := func(name string) string {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				return v
			}
		}
		return ""
	}
	limit, policy := field("maxmemory_human"), field("maxmemory_policy")
	if policy == "" || policy == "noeviction" || field("maxmemory") == "0" {
		return ""
	}
	return fmt.Sprintf("the Redis at %s evicts keys when full (maxmemory %s, maxmemory-policy %s): it may delete toolwire's records, so that a keyed call sent again runs again, a detached batch is lost or a cancel never arrives; set maxmemory-policy noeviction (a full Redis then refuses writes, which toolwire reports as the store being out) or give toolwire a Redis of its own", addr, limit, policy)
}

// tlsWarnings warns of TLS that does not check the server's certificate
// (the URL's skip_verify): anyone on the path can then read and change
// what toolwire stores, the credentials it sends included.
func tlsWarnings(c goredis.UniversalClient) []string {
	var t *tls.Config
	switch c := c.(type) {
	case *goredis.ClusterClient:
		t = c.Options().TLSConfig
	case *goredis.Client:
		t = c.Options().TLSConfig
	}
	// A VerifyConnection checks what InsecureSkipVerify leaves out
	// (Options.CAs: a CA file followed across rotations).
	if t == nil || !t.InsecureSkipVerify || t.VerifyConnection != nil {
		return nil
	}
	return []string{"the store's TLS does not check the Redis server's certificate (skip_verify in the URL): anyone on the network path can read and change what toolwire stores, and the password it sends; give the server's CA with store_tls_ca instead"}
}

// A Redis Cluster promotes a replica in the place of a master that
// stopped answering (crashed, frozen, cut off) once cluster-node-timeout
// has passed and its replicas have held an election (about a second
// more). Until then the master's slots take no writes, so no lease kept
// in them (a running keyed call's, a detached batch's) can be renewed,
// and Redis judges leases by its own clock: one shorter than the
// failover has run out on the promoted replica, and a resend to another
// toolwire replica takes the running call over and runs it again. Open
// reads the timeout (CONFIG GET, on every master) so that serve can say
// so at start.

// failoverElection is what a cluster's failover takes beyond its node
// timeout: the failure report's spread and the replicas' election.
const failoverElection = time.Second

// clusterFailoverTime returns the longest failover of c's masters:
// cluster-node-timeout plus failoverElection; 0 when no master lets
// CONFIG GET read it (an ACL user without it, a renamed command).
func clusterFailoverTime(ctx context.Context, c *goredis.ClusterClient) time.Duration {
	var (
		mu      sync.Mutex
		longest time.Duration
	)
	_ = c.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		v, err := c.ConfigGet(ctx, "cluster-node-timeout").Result()
		if err != nil {
			return nil
		}
		ms, err := strconv.ParseInt(v["cluster-node-timeout"], 10, 64)
		if err != nil || ms <= 0 {
			return nil
		}
		mu.Lock()
		longest = max(longest, time.Duration(ms)*time.Millisecond+failoverElection)
		mu.Unlock()
		return nil
	})
	return longest
}

// FailoverTime returns how long the Redis Cluster takes, at least, to
// promote a replica in a failed master's place, as Open read it; 0 for
// one Redis, or when the cluster did not let Open read it. serve warns
// when a lease is not longer.
func (s *Store) FailoverTime() time.Duration { return s.failover }

// Warnings returns what Open found that breaks toolwire's promises (a
// server that may evict keys, TLS that checks no certificate), one line
// each, for the operator: serve logs them.
func (s *Store) Warnings() []string { return slices.Clone(s.warnings) }

// probeScript writes a key that expires in 10 s: what every write of the
// store's does (a script, writing a key under its prefix), once.
var probeScript = goredis.NewScript(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 10000) return 1`)

// probeWrites has the server run a write script on a key of the store's
// own and returns an error when it refuses for a reason that will not
// pass: a user without the permission (NOPERM: a command, the scripts,
// the prefix's keys; the ACL of a Redis 7 user starts with none) or a
// server without the command (scripting disabled or renamed). Any other
// failure (a full server, a read-only replica behind a failover, a
// timeout) is left to the calls, which report the store as out, rather
// than keep every replica from starting.
func (s *Store) probeWrites(ctx context.Context) error {
	err := probeScript.Run(ctx, s.c, []string{s.tagged("probe", "start")}, "1").Err()
	var re goredis.Error
	if err == nil || !errors.As(err, &re) {
		return nil
	}
	if msg := re.Error(); strings.HasPrefix(msg, "NOPERM") || unknownCommand(err) {
		return fmt.Errorf("the server refused a write script (%s): toolwire needs Lua scripts (EVALSHA, EVAL) that read and write keys under its prefix %q, and the channel %q (docs/deploy.md, the shared store)", msg, s.prefix+"*", s.prefix+signalChannel)
	}
	return nil
}
