package bolt_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
)

// TestFullDisk fills the filesystem a bolt store lives on (a real tmpfs
// of 2 MiB, a filler file taking half of it) with idempotency records of
// 8 KiB results, until 20 writes in a row fail (ENOSPC), then goes on
// claiming. What the store said it stored it stored: every claim it
// reported and every result it completed is there (replayed, or in
// flight) on the full disk and after a reopen, and it never panics nor
// corrupts its file. With the filler removed it takes writes again
// without a restart.
func TestFullDisk(t *testing.T) {
	dir := testenv.SmallFS(t, 2<<20)
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "toolwire.db")
	open := func() *bolt.Store {
		s, err := bolt.Open(path, bolt.Options{})
		if err != nil {
			t.Fatalf("opening the store on the full disk: %v", err)
		}
		t.Cleanup(func() { s.Close() }) // before the unmount
		return s
	}
	s := open()
	ctx := context.Background()
	result := func(key string) []byte { return bytes.Repeat([]byte(key), 8<<10/len(key)) }
	completed := map[string]bool{}
	claimed := map[string]bool{} // reported Claimed, not completed
	inARow, failed := 0, 0
	for i := 0; inARow < 20 || i < 400; i++ {
		if i > 4000 {
			t.Fatalf("%d records in a 2 MiB filesystem and %d writes failed: it never filled", i, failed)
		}
		key := fmt.Sprintf("key-%04d", i)
		c, err := s.Claim(ctx, key, "fp", "owner", time.Hour, time.Hour)
		if err != nil {
			inARow++
			failed++
			continue
		}
		if c.State != store.Claimed {
			t.Fatalf("Claim of a new key %s: %v, want Claimed", key, c.State)
		}
		claimed[key] = true
		if err := s.Complete(ctx, key, "owner", result(key), time.Hour); err != nil {
			inARow++
			failed++
			continue
		}
		inARow = 0
		delete(claimed, key)
		completed[key] = true
	}
	// Claims of other keys on the full disk: those sorting first land in
	// a page with room, and are stored.
	for i := range 20 {
		key := fmt.Sprintf("a-late-%02d", i)
		if c, err := s.Claim(ctx, key, "fp", "owner", time.Minute, time.Hour); err == nil && c.State == store.Claimed {
			claimed[key] = true
		}
	}
	t.Logf("%d results completed, %d claims without one, %d writes refused", len(completed), len(claimed), failed)
	if len(completed) == 0 || failed == 0 {
		t.Fatal("nothing was completed, or nothing refused")
	}
	kept := func(s *bolt.Store, when string) {
		t.Helper()
		for key := range completed {
			c, err := s.Claim(ctx, key, "fp", "other", time.Hour, time.Hour)
			if err != nil || c.State != store.Completed || !bytes.Equal(c.Result, result(key)) {
				t.Fatalf("%s: completed %s: %v, %v; want its result replayed", when, key, c.State, err)
			}
		}
		for key := range claimed {
			c, err := s.Claim(ctx, key, "fp", "other", time.Hour, time.Hour)
			if err != nil || c.State != store.InFlight {
				t.Fatalf("%s: claimed %s: %v, %v; want it in flight (its claim was reported stored)", when, key, c.State, err)
			}
		}
	}
	kept(s, "disk full")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	kept(s, "reopened on the full disk")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctx, "after-room", "fp", "owner", time.Minute, time.Hour); err != nil || c.State != store.Claimed {
		t.Fatalf("Claim once there is room again: %v, %v; want Claimed", c.State, err)
	}
	if err := s.Complete(ctx, "after-room", "owner", result("after-room"), time.Hour); err != nil {
		t.Fatalf("Complete once there is room again: %v", err)
	}
	completed["after-room"] = true
	kept(s, "room again")
}
