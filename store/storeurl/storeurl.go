// Package storeurl opens a store.Store from the URL an operator writes in
// --store: "memory", "bolt:///path/to/file.db" or "redis://host:port/db".
// It lives apart from package store because it imports every backend.
package storeurl

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
)

// Open opens the store rawURL names; "" means memory.
func Open(ctx context.Context, rawURL string) (store.Store, error) {
	switch rawURL {
	case "", "memory", "memory:", "memory://":
		return memory.New(memory.Options{}), nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "bolt":
		// bolt:///abs/file.db has the path in Path; bolt:file.db in Opaque.
		path := u.Path
		if u.Opaque != "" {
			path = u.Opaque
		}
		if u.Host != "" || path == "" || strings.HasSuffix(path, "/") {
			return nil, fmt.Errorf("store %q: want bolt:///path/to/file.db", rawURL)
		}
		return bolt.Open(path, bolt.Options{})
	case "redis", "rediss":
		return redis.Open(ctx, rawURL, redis.Options{})
	default:
		return nil, fmt.Errorf("store %q: unknown kind; want memory, bolt:///path/to/file.db or redis://host:port/db", rawURL)
	}
}
