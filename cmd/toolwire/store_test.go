package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/engine"
)

func TestStoreFlagsAndKeys(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", "store: redis://127.0.0.1:6379/2\nidempotency_ttl: 1h\nidempotency_lease: 3s\nsession_ttl: 30m\n")
	cfg, _, err := parseServeArgs([]string{"--config", path, "--session-ttl", "5m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	type storeSettings struct {
		StoreConfig
		IdempotencyTTL, IdempotencyLease, SessionTTL time.Duration
	}
	want := storeSettings{StoreConfig{URL: "redis://127.0.0.1:6379/2"}, time.Hour, 3 * time.Second, 5 * time.Minute}
	got := storeSettings{cfg.StoreConfig, cfg.IdempotencyTTL, cfg.IdempotencyLease, cfg.SessionTTL}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("store config (-want +got):\n%s", diff)
	}
}

func TestServeRefusesABadStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ store, want string }{
		{"mongodb://x", "unknown kind"},
		{"bolt://" + filepath.Join(t.TempDir(), "missing", "dir", "x.db"), "bolt store"},
	} {
		err := run(t.Context(), []string{"serve", "--listen", "127.0.0.1:0", "--store", tc.store}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve --store %s: %v, want an error containing %q", tc.store, err, tc.want)
		}
	}
	// A malformed URL is refused before anything starts (tools, sources,
	// the admin listener); a store that cannot be opened only when opening.
	var stderr strings.Builder
	if err := run(t.Context(), []string{"serve", "--diag", "--listen", "127.0.0.1:0", "--store", "mongodb://x"}, io.Discard, &stderr); err == nil {
		t.Fatal("serve --store mongodb://x started")
	}
	if strings.Contains(stderr.String(), "serving tools") {
		t.Errorf("serve set up its tools before refusing a malformed store:\n%s", stderr.String())
	}
}

// TestServeBoltStoreReplaysAfterRestart runs serve twice on one bolt file:
// the second server replays the first one's result.
func TestServeBoltStoreReplaysAfterRestart(t *testing.T) {
	t.Parallel()
	db := "bolt://" + filepath.Join(t.TempDir(), "toolwire.db")
	batch := writeFile(t, "batch.json", `[{"call_id":"a","name":"echo","arguments":{"text":"once"},"idempotency_key":"k1"}]`)
	first := startServe(t, "--diag", "--store", db, "--idempotency-ttl", "1h")
	if got := runCmd(t, first.addr, "batch", batch); got.code != 0 || strings.Contains(got.stdout, `"replayed":true`) {
		t.Fatalf("first send: exit %d\n%s%s", got.code, got.stdout, got.stderr)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	second := startServe(t, "--diag", "--store", db)
	if got := runCmd(t, second.addr, "batch", batch); got.code != 0 || !strings.Contains(got.stdout, `"replayed":true`) {
		t.Fatalf("after a restart: exit %d, want a replayed result\n%s%s", got.code, got.stdout, got.stderr)
	}
}

func TestCallWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")
	first := runCmd(t, s.addr, "call", "--idempotency-key", "k1", "echo", `{"text":"hi"}`)
	again := runCmd(t, s.addr, "call", "--idempotency-key", "k1", "echo", `{"text":"hi"}`)
	if first.code != 0 || strings.Contains(first.stderr, "replayed") {
		t.Fatalf("first call: exit %d, stderr %q", first.code, first.stderr)
	}
	if again.code != 0 || again.stdout != "hi\n" || !strings.Contains(again.stderr, "replayed") {
		t.Fatalf("second call: exit %d, stdout %q, stderr %q; want a replay", again.code, again.stdout, again.stderr)
	}
	conflict := runCmd(t, s.addr, "call", "--idempotency-key", "k1", "echo", `{"text":"other"}`)
	if conflict.code != 1 || !strings.Contains(conflict.stderr, "IDEMPOTENCY_CONFLICT") {
		t.Fatalf("other arguments: exit %d, stderr %q; want an IDEMPOTENCY_CONFLICT", conflict.code, conflict.stderr)
	}
}

// TestLeaseWarnings: each lease a Redis Cluster's failover outlasts is
// warned of, naming the lease, its length and the failover's; none when
// the failover's length is not known.
func TestLeaseWarnings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      engine.Config
		failover time.Duration
		want     []string // what each warning starts with
	}{
		{"not known", engine.Config{}, 0, nil},
		{"Redis's default node timeout, toolwire's default leases", engine.Config{}, 16 * time.Second,
			[]string{"idempotency_lease (10s) is not longer than the Redis Cluster's failover", "batch_lease (10s) is not longer"}},
		{"leases above it", engine.Config{IdempotencyLease: 20 * time.Second, BatchLease: 17 * time.Second}, 16 * time.Second, nil},
		{"one lease equal to it", engine.Config{IdempotencyLease: 20 * time.Second, BatchLease: 3 * time.Second}, 3 * time.Second,
			[]string{"batch_lease (3s) is not longer than the Redis Cluster's failover (cluster-node-timeout and the election, at least 3s)"}},
	} {
		got := leaseWarnings(tc.cfg, tc.failover)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %q, want %d warnings", tc.name, got, len(tc.want))
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tc.want[i]) {
				t.Errorf("%s: warning %d = %q, want it to start %q", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}
