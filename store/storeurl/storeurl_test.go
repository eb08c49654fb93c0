package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/store/storeurl"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOpen(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		url  string
		want any
	}{
		{"", &memory.Store{}},
		{"memory", &memory.Store{}},
		{"bolt://" + filepath.Join(dir, "a.db"), &bolt.Store{}},
		{"redis://" + mr.Addr() + "/0", &redis.Store{}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			s, err := storeurl.Open(ctx, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got, want := typeName(s), typeName(tc.want); got != want {
				t.Fatalf("Open(%q) = %s, want %s", tc.url, got, want)
			}
		})
	}
}

func typeName(v any) string { return fmtType(v) }

func fmtType(v any) string {
	switch v.(type) {
	case *memory.Store:
		return "memory"
	case *bolt.Store:
		return "bolt"
	case *redis.Store:
		return "redis"
	}
	return "other"
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"mongodb://x", "unknown kind"},
		{"bolt://host/file.db", "want bolt:///path"},
		{"bolt:///", "want bolt:///path"},
		{"bolt://" + filepath.Join(t.TempDir(), "no", "such", "dir", "a.db"), "no such file"},
		{"redis://127.0.0.1:1/0", "redis store"},
		{"redis+cluster://127.0.0.1:1,127.0.0.1:2", "redis store cluster 127.0.0.1:1,127.0.0.1:2"},
		{"redis+cluster://127.0.0.1:1/3", "a cluster has one database, 0"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			s, err := storeurl.Open(ctx, tc.url)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tc.url)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%q) = %v, want it to say %q", tc.url, err, tc.want)
			}
		})
	}
}

// TestBoltBounds: a bolt URL's max_bytes and max_log_bytes bound the
// store it opens.
func TestBoltBounds(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := storeurl.Open(ctx, "bolt://"+path+"?max_bytes=64KiB&max_log_bytes=32KiB")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fill(t, s)
	entries, logs, err := s.(*bolt.Store).Bytes()
	if err != nil || entries > 64<<10 || logs > 32<<10 {
		t.Fatalf("the store holds %d and %d bytes (%v), want within 64 KiB and 32 KiB", entries, logs, err)
	}
}

// fill writes 20 variables and 20 finished event logs of 10 KiB each to s.
func fill(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	for i := range 20 {
		name := fmt.Sprint(i)
		if err := s.SetVar(ctx, "s", name, make([]byte, 10<<10), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour, make([]byte, 10<<10)); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, name, "o", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMemoryBounds: a memory URL's max_bytes and max_log_bytes bound the
// store it opens, as a bolt URL's do.
func TestMemoryBounds(t *testing.T) {
	ctx := context.Background()
	s, err := storeurl.Open(ctx, "memory://?max_bytes=64KiB&max_log_bytes=32KiB")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fill(t, s)
	entries, logs := s.(*memory.Store).Bytes()
	if entries > 64<<10 || logs > 32<<10 {
		t.Fatalf("the store holds %d and %d bytes, want within 64 KiB and 32 KiB", entries, logs)
	}
}

// TestOpenCluster: redis+cluster:// opens the store on a real Redis
// Cluster, which Kind names for logs.
func TestOpenCluster(t *testing.T) {
	url := testenv.RedisClusterURL(t)
	s, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*redis.Store); !ok {
		t.Fatalf("Open(%q) = %T, want *redis.Store", url, s)
	}
	if k := (storeurl.Config{URL: "rediss+cluster://u:secret@a:1,b:2"}).Kind(); k != "redis-cluster" {
		t.Errorf("Kind = %q, want redis-cluster", k)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"", ""},
		{"memory", ""},
		{"bolt:///var/lib/toolwire.db", ""},
		{"redis://127.0.0.1:6379/0", ""},
		{"rediss://redis:6380/0", ""},
		{"redis+cluster://a:7000,b:7001,c:7002", ""},
		{"rediss+cluster://user:pass@[::1]:7000,[::1]:7001/0?read_timeout=1s", ""},
		{"redis+cluster://a:7000,b", `node "b": want host:port`},
		{"redis+cluster://a:7000?max_redirect=1", "unexpected option"},
		{"mongodb://x", "unknown kind"},
		{"bolt://host/file.db", "want bolt:///path"},
		{"bolt:///", "want bolt:///path"},
		{"bolt:///var/lib/toolwire.db?max_bytes=512MiB&max_log_bytes=1073741824", ""},
		{"bolt:///var/lib/toolwire.db?max_bytes=0", "max_bytes: want a positive number"},
		{"bolt:///var/lib/toolwire.db?max_log_bytes=1TB", "max_log_bytes: want a positive number"},
		{"bolt:///var/lib/toolwire.db?max_entries=5", `unexpected option "max_entries"`},
		{"memory://?max_bytes=1GiB&max_log_bytes=512MiB", ""},
		{"memory://?max_bytes=0", "max_bytes: want a positive number"},
		{"memory://?max_entries=5", `unexpected option "max_entries"; a memory store takes max_bytes`},
		{"memory://host", "want memory, or memory://?max_bytes"},
		{"redis://[::1", "store \"redis://[::1\""},
	} {
		err := storeurl.Config{URL: tc.url}.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Validate(%q) = %v, want nil", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Validate(%q) = %v, want an error containing %q", tc.url, err, tc.want)
		}
	}
}

// TestSchemesDocumented: docs/configuration.md's store row names every
// kind of URL Validate takes.
func TestSchemesDocumented(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(string(page)) {
		if strings.HasPrefix(line, "| `store` |") {
			row = line
		}
	}
	for _, u := range []string{"memory", "bolt:///", "redis://", "rediss://", "redis+cluster://", "rediss+cluster://"} {
		if !strings.Contains(row, "`"+u) {
			t.Errorf("docs/configuration.md's store row does not name %s URLs:\n%s", u, row)
		}
	}
}

// TestErrorsHideThePassword: an error about a store URL, from this
// package, url.Parse or go-redis, never shows the URL's password (or its
// user information, which may be one), however the URL is malformed; the
// error still says what is wrong and keeps its chain.
func TestErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	for _, tc := range []struct{ url, want string }{
		{"redis://:s3cret@[::1/0", "missing ']' in host"},
		{"redis://user:s3cret@h:port/0", "invalid port"},
		{"redis://user:s3/cret@h:1/0", "invalid port"}, // a "/" in the password, not escaped
		{"redis://user:s3cret\"@h:port/0", "invalid port"},
		{"mongodb://u:s3cret@x", "unknown kind"},
		{"bolt://u:s3cret@host/file.db", "want bolt:///path"},
		{"redis+cluster://u:s3cret@a:7000/%zz", "invalid URL escape"},
		{"redis+cluster://s3cret@a:7000,b", `node "b": want host:port`},
		{"rediss+cluster://u:s3cret@a:7000/2", "a cluster has one database, 0"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			validated := storeurl.Config{URL: tc.url}.Validate()
			s, opened := storeurl.Open(t.Context(), tc.url)
			if opened == nil {
				s.Close()
			}
			for name, err := range map[string]error{"Validate": validated, "Open": opened} {
				if err == nil {
					t.Fatalf("%s(%q) succeeded", name, tc.url)
				}
				if msg := err.Error(); strings.Contains(msg, secret) || strings.Contains(msg, "s3/cret") || !strings.Contains(msg, tc.want) {
					t.Errorf("%s(%q) = %q: want it to say %q and not the password", name, tc.url, msg, tc.want)
				}
			}
		})
	}
	// The chain is kept: a caller can still tell what went wrong.
	err := storeurl.Config{URL: "redis://:s3cret@[::1/0"}.Validate()
	if _, ok := errors.AsType[*url.Error](err); !ok {
		t.Errorf("Validate's error %v does not wrap url.Parse's *url.Error", err)
	}
}
