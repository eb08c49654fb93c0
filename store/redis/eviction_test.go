package redis_test

import (
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/testenv"
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

// TestEvictionWarningCluster: on a Redis Cluster every master is looked
// at, and the one that evicts is named.
func TestEvictionWarningCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	masters := c.Masters(t)
	evicting := masters[1]
	evicting.Do(t, "CONFIG", "SET", "maxmemory", "64mb")
	evicting.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
	w := openAt(t, c.URL(), "evict:").Warnings()
	if len(w) != 1 || !strings.Contains(w[0], evicting.Addr) || !strings.Contains(w[0], "allkeys-lfu") {
		t.Errorf("warnings %q, want one naming %s and allkeys-lfu", w, evicting.Addr)
	}
}
