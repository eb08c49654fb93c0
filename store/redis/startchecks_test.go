package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
)

// TestEvictionWarning: a Redis with a memory limit and a policy that
// evicts keys (allkeys-*, or volatile-*, since every key of toolwire's
// has a TTL) is named in the store's Warnings, with the policy; one that
// does not evict (noeviction, or no limit) is not.
func TestEvictionWarning(t *testing.T) {
	srv := testenv.StartRedis(t)
	for _, tc := range []struct {
		maxmemory, policy string
		warn              bool
	}{
		{"0", "allkeys-lru", false}, // no limit: nothing is evicted
		{"64mb", "noeviction", false},
		{"64mb", "allkeys-lru", true},
		{"64mb", "volatile-lru", true}, // the managed services' usual default
		{"64mb", "volatile-ttl", true},
	} {
		srv.Do("CONFIG", "SET", "maxmemory", tc.maxmemory)
		srv.Do("CONFIG", "SET", "maxmemory-policy", tc.policy)
		w := openAt(t, srv.URL(), "evict:").Warnings()
		got := len(w) > 0
		if got != tc.warn || (got && (len(w) != 1 || !strings.Contains(w[0], "maxmemory-policy "+tc.policy) || !strings.Contains(w[0], srv.Addr))) {
			t.Errorf("maxmemory %s, policy %s: warnings %q, want a warning: %v", tc.maxmemory, tc.policy, w, tc.warn)
		}
	}
}

// TestClusterAsALeastPrivilegedUser: on a Redis Cluster of the test's
// own, as a user given only what docs/deploy.md says a cluster's user
// needs (a single Redis's, and CLUSTER INFO and SLOTS), the store's whole
// contract holds, and Open looks at every master: the one that evicts is
// named in its Warnings.
func TestClusterAsALeastPrivilegedUser(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	for _, n := range c.Nodes {
		n.Do(t, append(append([]string{"ACL", "SETUSER", "toolwire", "on", ">pw"}, leastPrivileged...), "+cluster|info", "+cluster|slots")...)
	}
	url := "redis+cluster://toolwire:pw@" + strings.TrimPrefix(c.URL(), "redis+cluster://")
	evicting := c.Masters(t)[1]
	evicting.Do(t, "CONFIG", "SET", "maxmemory", "64mb")
	evicting.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
	if w := openAt(t, url, "lp0:").Warnings(); len(w) != 1 || !strings.Contains(w[0], evicting.Addr) || !strings.Contains(w[0], "allkeys-lfu") {
		t.Errorf("warnings %q, want one naming %s and allkeys-lfu", w, evicting.Addr)
	}
	contractAs(t, url)

	// The failover's length, cluster-node-timeout and the election, is
	// read with CONFIG GET: not by this user, who may not.
	if f := openAt(t, url, "lp0:").FailoverTime(); f != 0 {
		t.Errorf("FailoverTime as a user without CONFIG GET = %v, want 0 (not known)", f)
	}
	_, ms, _ := strings.Cut(c.Nodes[0].Do(t, "CONFIG", "GET", "cluster-node-timeout"), "\n")
	nodeTimeout, err := time.ParseDuration(ms + "ms")
	if err != nil {
		t.Fatal(err)
	}
	if f := openAt(t, c.URL(), "ft:").FailoverTime(); f != nodeTimeout+time.Second {
		t.Errorf("FailoverTime = %v, want the node timeout %v and a second", f, nodeTimeout)
	}
}

// TestOpenRefusesAUserWhoCannotWrite: a Redis user the server will never
// let do the store's work (no scripts, keys outside its patterns,
// read-only) is refused at Open, with the server's NOPERM and what the
// store needs, rather than at the first keyed call; one with what it
// needs opens.
func TestOpenRefusesAUserWhoCannotWrite(t *testing.T) {
	srv := testenv.StartRedis(t)
	for user, rules := range map[string][]string{
		"noscripts":  {"~*", "&*", "+@all", "-@scripting"},
		"otherkeys":  {"~other:*", "&*", "+@all"},
		"readonly":   {"%R~*", "&*", "+@all"},
		"sufficient": {"~toolwire:*", "&toolwire:signals", "+@all"},
	} {
		srv.Do(append([]string{"ACL", "SETUSER", user, "on", ">pw"}, rules...)...)
		s, err := redis.Open(context.Background(), "redis://"+user+":pw@"+srv.Addr+"/0", redis.Options{})
		if user == "sufficient" {
			if err != nil {
				t.Errorf("%s (%q): %v", user, rules, err)
			} else {
				s.Close()
			}
			continue
		}
		if err == nil {
			s.Close()
			t.Errorf("%s (%q): Open succeeded", user, rules)
		} else if !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), `"toolwire:*"`) {
			t.Errorf("%s (%q): %v; want NOPERM and what the store needs", user, rules, err)
		}
	}
}
