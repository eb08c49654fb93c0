// Package storeurl opens a store.Store from the URL an operator writes in
// --store: "memory", "bolt:///path/to/file.db", "redis://host:port/db" or
// "redis+cluster://host:port,host:port,…"; a bolt or memory URL's query may
// bound the store in bytes (bolt:///path/to/file.db?max_bytes=1GiB&max_log_bytes=1GiB,
// memory://?max_bytes=1GiB).
// It lives apart from package store because it imports every backend.
package storeurl

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/toolwire/toolwire/internal/redact"
	"github.com/toolwire/toolwire/internal/tlsfiles"
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
	// TLSCA, TLSCert and TLSKey are PEM files for a Redis reached over TLS
	// (rediss://, rediss+cluster://): the CA whose certificates the
	// server's must chain to (instead of the system's), and the client
	// certificate and key for a server that requires one (Redis's
	// tls-auth-clients, on by default), read again when they change.
	TLSCA   string `json:"store_tls_ca"`
	TLSCert string `json:"store_tls_cert"`
	TLSKey  string `json:"store_tls_key"`
}

// Flags registers --store on fs, writing into c.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "store", c.URL, "idempotency and session `store`: memory, bolt:///path/to/file.db, redis://host:port/db or redis+cluster://host:port,host:port,… (default memory)")
	fs.StringVar(&c.TLSCA, "store-tls-ca", c.TLSCA, "PEM `file` of the CA a rediss:// store's certificate must chain to (default: the system's)")
	fs.StringVar(&c.TLSCert, "store-tls-cert", c.TLSCert, "PEM client certificate `file` for a rediss:// store that requires one (with --store-tls-key)")
	fs.StringVar(&c.TLSKey, "store-tls-key", c.TLSKey, "PEM private key `file` of --store-tls-cert")
}

// Validate checks that the URL names a kind of store and has that kind's
// shape, without opening it.
func (c Config) Validate() error {
	if _, _, _, err := parse(c.URL); err != nil {
		return redact.Error(err, c.URL)
	}
	_, _, err := c.tls()
	return err
}

// Open opens the configured store.
func (c Config) Open(ctx context.Context) (store.Store, error) {
	t, cas, err := c.tls()
	if err != nil {
		return nil, err
	}
	st, err := open(ctx, c.URL, redis.Options{TLS: t, CAs: cas})
	return st, redact.Error(err, c.URL)
}

// tls reads the TLS files into the settings a Redis store's connections
// take: the client certificate's in t, the CAs apart; nil when none is
// set. The files go with a URL with TLS. Both are read again when their
// files change: a rotated certificate is presented, and a rotated CA
// trusted, by the next connection, without a restart.
func (c Config) tls() (t *tls.Config, cas *tlsfiles.CAs, err error) {
	if c.TLSCA == "" && c.TLSCert == "" && c.TLSKey == "" {
		return nil, nil, nil
	}
	if !strings.HasPrefix(c.URL, "rediss://") && !strings.HasPrefix(c.URL, "rediss+cluster://") {
		return nil, nil, errors.New("store_tls_ca, store_tls_cert and store_tls_key are for a Redis reached over TLS: a rediss:// or rediss+cluster:// store")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, nil, errors.New("store_tls_cert and store_tls_key go together")
	}
	if c.TLSCA != "" {
		if cas, err = tlsfiles.LoadCAs(c.TLSCA); err != nil {
			return nil, nil, fmt.Errorf("store_tls_ca: %w", err)
		}
	}
	if c.TLSCert != "" {
		kp, err := tlsfiles.Load(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, nil, fmt.Errorf("store_tls_cert, store_tls_key: %w", err)
		}
		t = &tls.Config{MinVersion: tls.VersionTLS12, GetClientCertificate: kp.GetClientCertificate}
	}
	return t, cas, nil
}

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
	st, err := open(ctx, rawURL, redis.Options{})
	return st, redact.Error(err, rawURL)
}

// open opens the store rawURL names, a Redis one with ropts (its TLS
// settings beside the URL's).
func open(ctx context.Context, rawURL string, ropts redis.Options) (store.Store, error) {
	kind, path, b, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "bolt":
		return bolt.Open(path, bolt.Options{MaxBytes: b.maxBytes, MaxLogBytes: b.maxLogBytes})
	case "redis", "redis-cluster":
		return redis.Open(ctx, rawURL, ropts)
	}
	return memory.New(memory.Options{MaxBytes: int(b.maxBytes), MaxLogBytes: int(b.maxLogBytes)}), nil
}

// bounds are what a memory or bolt URL's query sets: the most its records
// and variables, and its event logs, may hold; 0: the store's default.
type bounds struct{ maxBytes, maxLogBytes int64 }

// parse returns the kind of store rawURL names (memory, bolt, redis or
// redis-cluster), for bolt the file's path, and for memory and bolt the
// bounds its query sets (max_bytes, max_log_bytes).
func parse(rawURL string) (kind, path string, b bounds, err error) {
	switch rawURL {
	case "", "memory", "memory:", "memory://":
		return "memory", "", b, nil
	}
	if redis.IsClusterURL(rawURL) {
		// Checked whole, as Open will read it (a node list is no URL host
		// for net/url), so a bad one is refused before anything is opened.
		if _, err := redis.ParseClusterURL(rawURL); err != nil {
			return "", "", b, fmt.Errorf("store: %w", err)
		}
		return "redis-cluster", "", b, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", b, fmt.Errorf("store %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "memory":
		if u.Host != "" || u.Path != "" || u.Opaque != "" {
			return "", "", b, fmt.Errorf("store %q: want memory, or memory://?max_bytes=…&max_log_bytes=…", rawURL)
		}
		b, err = parseBounds(rawURL, "a memory", u.Query())
		return "memory", "", b, err
	case "bolt":
		// bolt:///abs/file.db has the path in Path; bolt:file.db in Opaque.
		path := u.Path
		if u.Opaque != "" {
			path = u.Opaque
		}
		if u.Host != "" || path == "" || strings.HasSuffix(path, "/") {
			return "", "", b, fmt.Errorf("store %q: want bolt:///path/to/file.db", rawURL)
		}
		b, err = parseBounds(rawURL, "a bolt", u.Query())
		return "bolt", path, b, err
	case "redis", "rediss":
		return "redis", "", b, nil
	default:
		return "", "", b, fmt.Errorf("store %q: unknown kind; want memory, bolt:///path/to/file.db, redis://host:port/db or redis+cluster://host:port,host:port,…", rawURL)
	}
}

// parseBounds reads the bounds of a memory or bolt URL's query.
func parseBounds(rawURL, kind string, q url.Values) (bounds, error) {
	var b bounds
	for name, values := range q {
		var n *int64
		switch name {
		case "max_bytes":
			n = &b.maxBytes
		case "max_log_bytes":
			n = &b.maxLogBytes
		default:
			return b, fmt.Errorf("store %q: unexpected option %q; %s store takes max_bytes and max_log_bytes", rawURL, name, kind)
		}
		var err error
		if *n, err = parseBytes(values[len(values)-1]); err != nil {
			return b, fmt.Errorf("store %q: %s: %w", rawURL, name, err)
		}
		if *n > math.MaxInt {
			return b, fmt.Errorf("store %q: %s: too large", rawURL, name)
		}
	}
	return b, nil
}

// parseBytes reads a size: a positive number of bytes, or of KiB, MiB or
// GiB with that suffix (256MiB).
func parseBytes(s string) (int64, error) {
	unit := int64(1)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, unit = rest, u.size
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit {
		return 0, errors.New("want a positive number of bytes, or of KiB, MiB or GiB (256MiB)")
	}
	return n * unit, nil
}
