package redis_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/store/storetest"
)

// TestContractRedisCluster: the store contract on a real Redis Cluster (3
// masters, 3 replicas). Every script's keys must share a slot, or the
// cluster refuses it (CROSSSLOT); the subtests' prefixes and names spread
// the records over all three masters.
func TestContractRedisCluster(t *testing.T) {
	url := testenv.RedisClusterURL(t)
	run := fmt.Sprintf("test%d:", time.Now().UnixNano())
	var n atomic.Int64
	openWith := func(t *testing.T, opts redis.Options) *redis.Store {
		opts.Prefix = fmt.Sprintf("%s%d:", run, n.Add(1))
		s, err := redis.Open(context.Background(), url, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	open := func(t *testing.T) *redis.Store { return openWith(t, redis.Options{}) }
	storetest.Idempotency(t, open)
	storetest.Vars(t, open)
	// Two handles of one prefix, as two replicas hold them: the notices go
	// by sharded pub/sub to the node of their channel's slot.
	storetest.Signals(t, func(t *testing.T) (*redis.Store, *redis.Store) {
		prefix := fmt.Sprintf("%s%d:", run, n.Add(1))
		pair := func() *redis.Store {
			s, err := redis.Open(context.Background(), url, redis.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return pair(), pair()
	})
	storetest.EventLog(t, func(t *testing.T) *redis.Store {
		return openWith(t, redis.Options{MaxLogEntries: 5})
	}, storetest.WithMaxLogEntries(5))

	// Names the tag rule must write apart (keys.go): each on its own.
	s := open(t)
	ctx := context.Background()
	for _, name := range []string{"", "}", "}x", "%", "%}x", "{", "{}", "a}b", "{a}"} {
		if err := s.Open(ctx, name, "o", time.Minute, time.Minute); err != nil {
			t.Fatalf("log %q: Open: %v", name, err)
		}
		if _, err := s.Append(ctx, name, "o", []byte(name)); err != nil {
			t.Fatalf("log %q: Append: %v", name, err)
		}
		if _, err := s.Claim(ctx, name, "fp", "o", time.Minute, time.Minute); err != nil {
			t.Fatalf("record %q: Claim: %v", name, err)
		}
		if _, err := s.TakeRate(ctx, name, 1, 10, 1); err != nil {
			t.Fatalf("rate %q: %v", name, err)
		}
	}
	for _, name := range []string{"", "}", "}x", "%", "%}x", "{", "{}", "a}b", "{a}"} {
		for e, err := range s.After(ctx, name, 0) {
			if err != nil || string(e.Data) != name {
				t.Errorf("log %q holds %q (%v): names were not kept apart", name, e.Data, err)
			}
		}
	}
}

// TestTakeRateRedisCluster: the shared rate limit through two clients of
// the cluster, as two replicas would take it.
func TestTakeRateRedisCluster(t *testing.T) {
	url := testenv.RedisClusterURL(t)
	prefix := fmt.Sprintf("rate%d:", time.Now().UnixNano())
	open := func() *redis.Store {
		s, err := redis.Open(context.Background(), url, redis.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	ctx := context.Background()
	for i := range 5 {
		if d, err := a.TakeRate(ctx, "alice", 1, 1, 5); err != nil || d != 0 {
			t.Fatalf("call %d of the burst: wait %v, %v; want none", i, d, err)
		}
	}
	if d, err := b.TakeRate(ctx, "alice", 1, 1, 5); err != nil || d <= 0 {
		t.Fatalf("past the burst, on the other client: wait %v, %v; want a wait", d, err)
	}
}

// TestOpenWrongKind: a URL of the wrong kind for the server is refused at
// Open with what to write instead, not left to fail key by key.
func TestOpenWrongKind(t *testing.T) {
	ctx := context.Background()
	cluster := testenv.RedisClusterURL(t)
	single := testenv.RedisAddr(t)
	first, _, _ := strings.Cut(strings.TrimPrefix(cluster, "redis+cluster://"), ",")
	for _, tc := range []struct{ url, want string }{
		{"redis://" + first + "/0", "name the cluster as redis+cluster://"},
		{"redis+cluster://" + single, "cluster support disabled"},
	} {
		s, err := redis.Open(ctx, tc.url, redis.Options{})
		if err == nil {
			s.Close()
			t.Fatalf("Open(%q) succeeded", tc.url)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want it to say %q", tc.url, err, tc.want)
		}
	}
}

func TestParseClusterURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url   string
		addrs string
		user  string
		pass  string
		tls   bool
		want  string // an error containing it
		check func(t *testing.T, url string)
	}{
		{url: "redis+cluster://a:7000,b:7001,c:7002", addrs: "a:7000 b:7001 c:7002"},
		{url: "redis+cluster://a:7000/0", addrs: "a:7000"},
		{url: "redis+cluster://u:p%40ss@a:7000,[::1]:7001/?read_timeout=5s", addrs: "a:7000 [::1]:7001", user: "u", pass: "p@ss"},
		{url: "rediss+cluster://:secret@a:7000,b:7001", addrs: "a:7000 b:7001", pass: "secret", tls: true},
		{url: "redis+cluster://", want: "no nodes"},
		{url: "redis+cluster://a:7000,,b:7001", want: `node ""`},
		{url: "redis+cluster://a,b:7001", want: `node "a"`},
		{url: "redis+cluster://a:x", want: "port must be a number"},
		{url: "redis+cluster://a:7000/1", want: "one database, 0"},
		{url: "redis+cluster://a:7000?nonsense=1", want: "unexpected option"},
		{url: "redis://a:7000", want: "not a cluster URL"},
	} {
		o, err := redis.ParseClusterURL(tc.url)
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseClusterURL(%q) = %v, want an error saying %q", tc.url, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseClusterURL(%q): %v", tc.url, err)
			continue
		}
		if got := strings.Join(o.Addrs, " "); got != tc.addrs || o.Username != tc.user || o.Password != tc.pass || (o.TLSConfig != nil) != tc.tls {
			t.Errorf("ParseClusterURL(%q) = addrs %q user %q pass %q tls %v; want %q %q %q %v", tc.url, got, o.Username, o.Password, o.TLSConfig != nil, tc.addrs, tc.user, tc.pass, tc.tls)
		}
		if !o.ContextTimeoutEnabled || o.MaxRetries != -1 || o.DialTimeout != 2*time.Second {
			t.Errorf("ParseClusterURL(%q): ContextTimeoutEnabled %v, MaxRetries %d, DialTimeout %v; want the store's defaults", tc.url, o.ContextTimeoutEnabled, o.MaxRetries, o.DialTimeout)
		}
	}
	if o, _ := redis.ParseClusterURL("redis+cluster://a:7000?read_timeout=5s&max_redirects=8"); o.ReadTimeout != 5*time.Second || o.WriteTimeout != 5*time.Second || o.MaxRedirects != 8 {
		t.Errorf("the URL's own settings were not kept: read %v write %v redirects %d", o.ReadTimeout, o.WriteTimeout, o.MaxRedirects)
	}
}

// TestClusterSeedOfNoCluster: a seed node that belongs to no cluster (one
// removed with redis-cli --cluster del-node, which resets it and leaves
// it running) answers CLUSTER SLOTS with no slot, and go-redis takes the
// cluster's layout from a seed picked at random: Open with such a seed
// beside live ones failed about every other time ("redis: cluster has no
// nodes"). Open leaves it out; with no other seed, it says why.
func TestClusterSeedOfNoCluster(t *testing.T) {
	url := testenv.RedisClusterURL(t)
	lone := testenv.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))
	ctx := context.Background()
	prefix := fmt.Sprintf("seed%d:", time.Now().UnixNano())
	for i := range 10 {
		s, err := redis.Open(ctx, "redis+cluster://"+lone.Addr+","+strings.TrimPrefix(url, "redis+cluster://"), redis.Options{Prefix: prefix})
		if err != nil {
			t.Fatalf("Open %d, a seed of no cluster first: %v", i, err)
		}
		_, err = s.TakeRate(ctx, fmt.Sprint("k", i), 1, 100, 10)
		s.Close()
		if err != nil {
			t.Fatalf("Open %d, a seed of no cluster first: TakeRate: %v", i, err)
		}
	}
	s, err := redis.Open(ctx, "redis+cluster://"+lone.Addr, redis.Options{Prefix: prefix})
	if err == nil {
		s.Close()
		t.Fatal("Open with a seed of no cluster alone succeeded")
	}
	if !strings.Contains(err.Error(), "no seed node serves a slot ("+lone.Addr) {
		t.Errorf("Open with a seed of no cluster alone: %v; want it to say the seed serves no slot", err)
	}
}
