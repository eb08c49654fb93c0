// Package storeurl opens a store.Store from the URL an operator writes in
// --store: "memory", "bolt:///path/to/file.db", "redis://host:port/db" or
// "redis+cluster://host:port,host:port,…".
// It lives apart from package store because it imports every backend.
package storeurl

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"strings"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
)

// Config is the store setting of serve's config file: the key "store",
// the flag --store.
type Config struct {
	// URL names the store: memory (default), bolt:///path/to/file.db,
	// redis://host:port/db or, for a Redis Cluster,
	// redis+cluster://host:port,host:port,… (rediss:// and rediss+cluster://
	// for TLS).
	URL string `json:"store"`
}

// Flags registers --store on fs, writing into c.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "store", c.URL, "idempotency and session `store`: memory, bolt:///path/to/file.db, redis://host:port/db or redis+cluster://host:port,host:port,… (default memory)")
}

// Validate checks that the URL names a kind of store and has that kind's
// shape, without opening it.
func (c Config) Validate() error {
	_, _, err := parse(c.URL)
	return err
}

// Open opens the configured store.
func (c Config) Open(ctx context.Context) (store.Store, error) { return Open(ctx, c.URL) }

// Kind names the kind of store c opens, for logs: memory, bolt, redis or
// redis-cluster.
// The URL itself may hold a password, so it is not for logs.
func (c Config) Kind() string {
	scheme, _, ok := strings.Cut(c.URL, ":")
	if !ok || scheme == "" {
		scheme = c.URL
	}
	switch scheme {
	case "", "memory":
		return "memory"
	case "rediss":
		return "redis"
	case "redis+cluster", "rediss+cluster":
		return "redis-cluster"
	}
	return scheme
}

// Open opens the store rawURL names; "" means memory.
func Open(ctx context.Context, rawURL string) (store.Store, error) {
	kind, path, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "bolt":
		return bolt.Open(path, bolt.Options{})
	case "redis", "redis-cluster":
		return redis.Open(ctx, rawURL, redis.Options{})
	}
	return memory.New(memory.Options{}), nil
}

// parse returns the kind of store rawURL names (memory, bolt, redis or
// redis-cluster) and,
// for bolt, the file's path.
func parse(rawURL string) (kind, path string, err error) {
	switch rawURL {
	case "", "memory", "memory:", "memory://":
		return "memory", "", nil
	}
	if redis.IsClusterURL(rawURL) {
		// Checked whole, as Open will read it (a node list is no URL host
		// for net/url), so a bad one is refused before anything is opened.
		if _, err := redis.ParseClusterURL(rawURL); err != nil {
			return "", "", fmt.Errorf("store: %w", err)
		}
		return "redis-cluster", "", nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", fmt.Errorf("store %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "bolt":
		// bolt:///abs/file.db has the path in Path; bolt:file.db in Opaque.
		path := u.Path
		if u.Opaque != "" {
			path = u.Opaque
		}
		if u.Host != "" || path == "" || strings.HasSuffix(path, "/") {
			return "", "", fmt.Errorf("store %q: want bolt:///path/to/file.db", rawURL)
		}
		return "bolt", path, nil
	case "redis", "rediss":
		return "redis", "", nil
	default:
		return "", "", fmt.Errorf("store %q: unknown kind; want memory, bolt:///path/to/file.db, redis://host:port/db or redis+cluster://host:port,host:port,…", rawURL)
	}
}
