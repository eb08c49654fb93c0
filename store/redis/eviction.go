package redis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

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

// Warnings returns what Open found in the server's configuration that
// breaks toolwire's promises (a server that may evict keys), one line
// each, for the operator: serve logs them.
func (s *Store) Warnings() []string { return slices.Clone(s.warnings) }
