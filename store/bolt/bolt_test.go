package bolt_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/storetest"
	bbolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, path string) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	fresh := func(t *testing.T) *bolt.Store {
		s := open(t, filepath.Join(t.TempDir(), "toolwire.db"))
		t.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Idempotency(t, fresh)
	storetest.Vars(t, fresh)
	// One process holds a bolt file (it is locked): the engines sharing
	// it share the Store.
	storetest.Signals(t, func(t *testing.T) (*bolt.Store, *bolt.Store) { s := fresh(t); return s, s })
	storetest.EventLog(t, func(t *testing.T) *bolt.Store {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "toolwire.db"), bolt.Options{MaxLogEntries: 5})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, storetest.WithMaxLogEntries(5))
}

// TestSweepDeletesExpiredLogs: finished logs past their TTL leave the file.
func TestSweepDeletesExpiredLogs(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "toolwire.db"))
	defer s.Close()
	for i := range 50 {
		name := string(rune('a'+i%26)) + string(rune('a'+i/26))
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, name, "o", []byte("x")); err != nil {
			t.Fatal(err)
		}
		ttl := time.Hour
		if i%2 == 0 {
			ttl = time.Millisecond
		}
		if err := s.Finish(ctx, name, "o", ttl); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Logs(); err != nil || n != 25 {
		t.Fatalf("after Sweep the file holds %d logs (%v), want the 25 unexpired", n, err)
	}
}

// TestSurvivesReopen is the reason for this backend: a completed record and a
// variable outlive the process that wrote them.
func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolwire.db")
	s := open(t, path)
	if _, err := s.Claim(ctx, "k", "fp", "a", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "k", "a", []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVar(ctx, "s", "x", []byte("1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	defer s.Close()
	if c, err := s.Claim(ctx, "k", "fp", "b", time.Hour, time.Hour); err != nil || c.State != store.Completed || string(c.Result) != "r" {
		t.Fatalf("after reopening, Claim = %v %q %v; want completed \"r\"", c.State, c.Result, err)
	}
	if v, ok, err := s.GetVar(ctx, "s", "x"); err != nil || !ok || string(v) != "1" {
		t.Fatalf("after reopening, variable = %q %v %v", v, ok, err)
	}
}

func TestLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolwire.db")
	s := open(t, path)
	defer s.Close()
	if _, err := bolt.Open(path, bolt.Options{LockTimeout: 50 * time.Millisecond}); err == nil {
		t.Fatal("a second Open of a locked file succeeded")
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolwire.db")
	s := open(t, path)
	if err := s.SetVar(ctx, "s", "x", []byte("1"), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVar(ctx, "s", "kept", []byte("1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "k", "fp", "a", time.Millisecond, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Look into the file itself: only the live variable is left.
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var keys []string
	err = db.View(func(tx *bbolt.Tx) error {
		// The records, variables and logs (the other buckets are their
		// counts and indexes, which TestBoundsSurviveReopen checks).
		for _, name := range []string{"idempotency", "session", "eventlog"} {
			err := tx.Bucket([]byte(name)).ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != store.ScopedName("s", "kept") {
		t.Fatalf("after the sweep the file holds %q, want only the live variable", keys)
	}
}
