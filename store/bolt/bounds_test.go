package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	bbolt "go.etcd.io/bbolt"
)

func openWith(t *testing.T, path string, opts bolt.Options) *bolt.Store {
	t.Helper()
	opts.LockTimeout = 100 * time.Millisecond
	s, err := bolt.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func bytesOf(t *testing.T, s *bolt.Store) (entries, logs int64) {
	t.Helper()
	entries, logs, err := s.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return entries, logs
}

func complete(t *testing.T, s *bolt.Store, key string, result []byte) {
	t.Helper()
	ctx := context.Background()
	if c, err := s.Claim(ctx, key, "fp", "o", time.Hour, time.Hour); err != nil || c.State != store.Claimed {
		t.Fatalf("Claim %s: %v %v", key, c.State, err)
	}
	if err := s.Complete(ctx, key, "o", result, time.Hour); err != nil {
		t.Fatalf("Complete %s: %v", key, err)
	}
}

// TestBoundedInBytes: records and variables past MaxBytes are evicted,
// the least recently written first, and the file stops growing. Without
// the bound the file grew by 0.28 MiB a keyed call of 200 KiB for
// idempotency_ttl, however many calls came (114 MiB after 400).
func TestBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	const maxBytes = 1 << 20
	s := openWith(t, filepath.Join(t.TempDir(), "toolwire.db"), bolt.Options{MaxBytes: maxBytes})
	result := make([]byte, 100<<10)
	for i := range 50 {
		key := fmt.Sprint(i)
		complete(t, s, key, result)
		if err := s.SetVar(ctx, "s", key, result, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := bytesOf(t, s); n > maxBytes {
		t.Fatalf("records and variables hold %d bytes, over MaxBytes %d", n, maxBytes)
	}
	if c, _ := s.Claim(ctx, "49", "fp", "p", time.Hour, time.Hour); c.State != store.Completed {
		t.Fatalf("latest record = %v, want completed", c.State)
	}
	if _, ok, _ := s.GetVar(ctx, "s", "49"); !ok {
		t.Fatal("the latest variable was evicted")
	}
	if c, _ := s.Claim(ctx, "0", "fp", "p", time.Hour, time.Hour); c.State != store.Claimed {
		t.Fatalf("first record = %v, want evicted (Claimed anew)", c.State)
	}
	// Releasing a claim and deleting a variable give their bytes back.
	before, _ := bytesOf(t, s)
	if _, err := s.Claim(ctx, "x", "fp", "o", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVar(ctx, "s", "y", []byte("1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "x", "o"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVar(ctx, "s", "y"); err != nil {
		t.Fatal(err)
	}
	if after, _ := bytesOf(t, s); after != before {
		t.Fatalf("a claim released and a variable deleted left %d bytes counted", after-before)
	}
	// A record larger than the bound alone is kept, alone.
	complete(t, s, "huge", make([]byte, 2*maxBytes))
	if c, _ := s.Claim(ctx, "huge", "fp", "p", time.Hour, time.Hour); c.State != store.Completed {
		t.Fatalf("a record over the bound alone = %v, want kept", c.State)
	}
}

// TestLogsBoundedInBytes: finished event logs past MaxLogBytes go, the
// oldest first, before their TTL; logs still being written stay, however
// much they hold, and so does the one finished last. Without the bound
// the file grew by 0.4 MiB a finished detached batch of two 200 KiB
// results, for batch_ttl.
func TestLogsBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	const maxLogBytes = 1 << 20
	s := openWith(t, filepath.Join(t.TempDir(), "toolwire.db"), bolt.Options{MaxLogBytes: maxLogBytes})
	event := make([]byte, 100<<10)
	if err := s.Open(ctx, "running", "o", time.Hour, time.Hour, event); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		name := fmt.Sprint("log", i)
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour, event); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, name, "o", time.Hour, event); err != nil {
			t.Fatal(err)
		}
	}
	if _, n := bytesOf(t, s); n > maxLogBytes {
		t.Fatalf("logs hold %d bytes, over MaxLogBytes %d", n, maxLogBytes)
	}
	if _, err := s.Stat(ctx, "log0"); !errors.Is(err, store.ErrLogNotFound) {
		t.Fatalf("Stat of the log finished first = %v, want ErrLogNotFound", err)
	}
	if info, err := s.Stat(ctx, "log39"); err != nil || !info.Finished {
		t.Fatalf("Stat of the log finished last = %v, %v; want it kept", info, err)
	}
	// The running log outgrows the bound alone: it stays, and pushes out
	// every finished log but the last.
	for range 20 {
		if _, err := s.Append(ctx, "running", "o", event); err != nil {
			t.Fatalf("Append to the running log: %v", err)
		}
	}
	if n, err := s.Logs(); err != nil || n != 2 {
		t.Fatalf("store holds %d logs (%v), want the running one and the one finished last", n, err)
	}
	if info, err := s.Stat(ctx, "running"); err != nil || info.Last != 21 {
		t.Fatalf("Stat of the running log = %v, %v; want 21 entries", info, err)
	}
	// An expired log, swept, gives its bytes back.
	if err := s.Open(ctx, "short", "o", time.Millisecond, time.Millisecond, event); err != nil {
		t.Fatal(err)
	}
	_, before := bytesOf(t, s)
	time.Sleep(5 * time.Millisecond)
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, after := bytesOf(t, s); before-after < int64(len(event)) {
		t.Fatalf("an expired log gave back %d bytes, want at least %d", before-after, len(event))
	}
}

// TestFileStopsGrowing: under a steady stream of keyed results and
// finished logs past the bounds, the file stops growing: bbolt never
// shrinks its file, but reuses the pages that evictions free.
func TestFileStopsGrowing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolwire.db")
	const bound = 2 << 20
	s := openWith(t, path, bolt.Options{MaxBytes: bound, MaxLogBytes: bound})
	result := make([]byte, 100<<10)
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	var sizes []int64
	for round := range 5 {
		for i := range 30 {
			name := fmt.Sprint(round, "-", i)
			complete(t, s, name, result)
			if err := s.Open(ctx, name, "o", time.Hour, time.Hour, result); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, name, "o", time.Hour, result); err != nil {
				t.Fatal(err)
			}
		}
		sizes = append(sizes, size())
	}
	t.Logf("file after each 30 keyed results and 30 finished logs of 100 KiB (bounds 2 MiB each): %v bytes", sizes)
	// Unbounded, 150 of each would be about 50 MiB.
	if last := sizes[len(sizes)-1]; last > 16<<20 || last > sizes[1] {
		t.Fatalf("file sizes %v: it kept growing past the bounds", sizes)
	}
}

// TestBoundsSurviveReopen: the counts live in the file, written in the
// transactions that change what they count; a file whose counts are
// missing (written before they existed) or wrong (written since by an
// older version) has them rebuilt by Open, and the bounds hold on.
func TestBoundsSurviveReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolwire.db")
	s := openWith(t, path, bolt.Options{})
	for i := range 10 {
		complete(t, s, fmt.Sprint("k", i), make([]byte, 10<<10))
		name := fmt.Sprint("log", i)
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour, make([]byte, 10<<10)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.Finish(ctx, name, "o", time.Hour, []byte("end")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.SetVar(ctx, "s", "v", []byte(`"x"`), time.Hour); err != nil {
		t.Fatal(err)
	}
	entries, logs := bytesOf(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	reopen := func(what string) *bolt.Store {
		t.Helper()
		s := openWith(t, path, bolt.Options{})
		if e, l := bytesOf(t, s); e != entries || l != logs {
			t.Fatalf("%s: counts %d, %d; want %d, %d", what, e, l, entries, logs)
		}
		return s
	}
	reopen("reopened").Close()
	edit := func(fn func(tx *bbolt.Tx) error) {
		t.Helper()
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(fn); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A file from before the counts.
	edit(func(tx *bbolt.Tx) error {
		for _, b := range []string{"bounds", "written", "writeseq", "logsize", "finished"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	reopen("counts missing").Close()
	// An older version wrote a record and a log without counting them.
	edit(func(tx *bbolt.Tx) error {
		if err := tx.Bucket([]byte("idempotency")).Delete([]byte("k0")); err != nil {
			return err
		}
		return tx.Bucket([]byte("eventlog")).DeleteBucket([]byte("log0"))
	})
	s = openWith(t, path, bolt.Options{})
	if e, l := bytesOf(t, s); e >= entries || l >= logs {
		t.Fatalf("after an uncounted delete: counts %d, %d; want below %d, %d", e, l, entries, logs)
	}
	s.Close()
	// Lower bounds apply at Open: the oldest go.
	s = openWith(t, path, bolt.Options{MaxBytes: 30 << 10, MaxLogBytes: 30 << 10})
	if e, _ := bytesOf(t, s); e > 30<<10 {
		t.Fatalf("opened with lower bounds: records hold %d bytes; want within 30 KiB", e)
	}
	// The five running logs stay, over the bound, and the one finished last.
	if n, err := s.Logs(); err != nil || n != 6 {
		t.Fatalf("opened with lower bounds: %d logs (%v), want 6", n, err)
	}
	if _, err := s.Stat(ctx, "log8"); err != nil {
		t.Fatalf("the log finished last: %v, want kept", err)
	}
	if c, _ := s.Claim(ctx, "k9", "fp", "p", time.Hour, time.Hour); c.State != store.Completed {
		t.Fatalf("the most recent record after lower bounds = %v, want kept", c.State)
	}
}

// TestOpenSaysWhatItDrops: a file that holds more than its bounds (one
// that grew under a version without them, met at the first start after an
// upgrade, or under higher bounds) is brought within them by Open, which
// says what it dropped in Warnings, for serve to log: it used to drop the
// records and logs without a word, and the retries of those keyed calls
// ran them again. Within the bounds, Open says nothing.
func TestOpenSaysWhatItDrops(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolwire.db")
	s := openWith(t, path, bolt.Options{})
	for i := range 10 {
		complete(t, s, fmt.Sprint("k", i), make([]byte, 10<<10))
		name := fmt.Sprint("log", i)
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour, make([]byte, 10<<10)); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, name, "o", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("a file within its bounds: warnings %q; want none", w)
	}
	s.Close()
	// As a version without the bounds left it: no counts.
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, b := range []string{"bounds", "written", "writeseq", "logsize", "finished"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = openWith(t, path, bolt.Options{MaxBytes: 30 << 10, MaxLogBytes: 30 << 10})
	w := s.Warnings()
	// The least recently written went first: count what is left from the newest.
	kept := 0
	for i := 9; i >= 0; i-- {
		if c, _ := s.Claim(ctx, fmt.Sprint("k", i), "fp", "p", time.Hour, time.Hour); c.State != store.Completed {
			break
		}
		kept++
	}
	logs, err := s.Logs()
	if err != nil {
		t.Fatal(err)
	}
	if kept == 10 || logs == 10 {
		t.Fatalf("kept %d records and %d logs of 10 each; want some dropped by the lower bounds", kept, logs)
	}
	want := []string{
		fmt.Sprintf("dropped %d idempotency records and session variables", 10-kept),
		fmt.Sprintf("dropped the logs of %d finished detached batches", 10-logs),
	}
	if len(w) != len(want) {
		t.Fatalf("warnings %q; want %d, one saying each of %q", w, len(want), want)
	}
	for i := range want {
		if !strings.Contains(w[i], want[i]) || !strings.Contains(w[i], path) {
			t.Errorf("warning %q; want it to name %s and say %q", w[i], path, want[i])
		}
	}
	s.Close()
	if w := openWith(t, path, bolt.Options{MaxBytes: 30 << 10, MaxLogBytes: 30 << 10}).Warnings(); len(w) != 0 {
		t.Errorf("reopened within the bounds: warnings %q; want none", w)
	}
}
