package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	bbolt "go.etcd.io/bbolt"
)

// holdNextCommit makes the next group commit of s wait, once started,
// until release is closed; entered is closed when it waits.
func holdNextCommit(s *bolt.Store) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	bolt.SetBeforeCommit(s, func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	return entered, release
}

func fresh(t *testing.T) *bolt.Store {
	t.Helper()
	s := open(t, filepath.Join(t.TempDir(), "toolwire.db"))
	t.Cleanup(func() { s.Close() })
	return s
}

// waitQueued waits until n writes wait for the next commit.
func waitQueued(t *testing.T, s *bolt.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for bolt.Queued(s) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", bolt.Queued(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWritesQueuedDuringACommitShareTheNext: the event logs' writes that
// arrive while a commit is under way go together in the next transaction,
// whichever logs they write; one the store refuses (another owner's) is
// refused alone, and the group goes on without it.
func TestWritesQueuedDuringACommitShareTheNext(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	for _, name := range []string{"a", "b", "c"} {
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := holdNextCommit(s)
	before := s.Commits()
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	write := func(f func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- f() }()
	}
	// The first write leads, and its commit is held.
	write(func() error { _, err := s.Append(ctx, "a", "o", []byte("a1")); return err })
	<-entered
	write(func() error { _, err := s.Append(ctx, "a", "o", []byte("a2"), []byte("a3")); return err })
	write(func() error { _, err := s.Append(ctx, "b", "o", []byte("b1")); return err })
	write(func() error { return s.Finish(ctx, "c", "o", time.Hour, []byte("c1")) })
	write(func() error { return s.Open(ctx, "d", "o", time.Hour, time.Hour, []byte("d1")) })
	write(func() error {
		if _, err := s.Append(ctx, "b", "intruder", []byte("x")); !errors.Is(err, store.ErrLeaseLost) {
			return fmt.Errorf("Append by another owner: %v, want ErrLeaseLost", err)
		}
		return nil
	})
	waitQueued(t, s, 5)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Commits() - before; n != 2 {
		t.Fatalf("%d commits for 6 writes, want 2: the held one, then the 5 queued behind it together", n)
	}
	for name, want := range map[string][]string{"a": {"a1", "a2", "a3"}, "b": {"b1"}, "c": {"c1"}, "d": {"d1"}} {
		var got []string
		for e, err := range s.After(ctx, name, 0) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(e.Data))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("log %s holds %q, want %q", name, got, want)
		}
	}
	if info, err := s.Stat(ctx, "c"); err != nil || !info.Finished {
		t.Errorf("log c: %+v %v, want finished", info, err)
	}
}

// TestAFailedWriteDoesNotSinkItsGroup: a write that fails unexpectedly
// (after writing part of what it meant to) rolls its group back; each of
// the group's writes is then run alone, so the others land and the failed
// one leaves nothing.
func TestAFailedWriteDoesNotSinkItsGroup(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	for _, name := range []string{"a", "b"} {
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := holdNextCommit(s)
	before := s.Commits()
	var wg sync.WaitGroup
	var leadErr, aErr, bErr, badErr error
	wg.Add(4)
	go func() { defer wg.Done(); _, leadErr = s.Append(ctx, "a", "o", []byte("a1")) }()
	<-entered
	go func() { defer wg.Done(); _, aErr = s.Append(ctx, "a", "o", []byte("a2")) }()
	waitQueued(t, s, 1)
	broken := errors.New("a write that broke halfway")
	go func() {
		defer wg.Done()
		badErr = bolt.Grouped(s, func(tx *bbolt.Tx) error {
			if err := tx.Bucket([]byte("eventlog")).Put([]byte("half"), []byte("written")); err != nil {
				return err
			}
			return broken
		})
	}()
	waitQueued(t, s, 2)
	go func() { defer wg.Done(); _, bErr = s.Append(ctx, "b", "o", []byte("b1")) }()
	waitQueued(t, s, 3)
	close(release)
	wg.Wait()
	if leadErr != nil || aErr != nil || bErr != nil || !errors.Is(badErr, broken) {
		t.Fatalf("errors: lead %v, a %v, b %v, the broken write %v", leadErr, aErr, bErr, badErr)
	}
	// The held commit, the group rolled back, then its three writes alone.
	if n := s.Commits() - before; n != 5 {
		t.Fatalf("%d transactions, want 5", n)
	}
	for name, want := range map[string]uint64{"a": 2, "b": 1} {
		if info, err := s.Stat(ctx, name); err != nil || info.Last != want {
			t.Errorf("log %s: %+v %v, want %d entries", name, info, err, want)
		}
	}
	if err := bolt.Grouped(s, func(tx *bbolt.Tx) error {
		if v := tx.Bucket([]byte("eventlog")).Get([]byte("half")); v != nil {
			return fmt.Errorf("the broken write's half is in the file: %q", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestVarWritesShareACommit: the variables' writes (a held call's
// announcement, renewed every few seconds, is a SetVar) that arrive while
// a commit is under way go together in the next transaction, as the event
// logs' do; of two AddVars of one name in a group, the first adds it.
func TestVarWritesShareACommit(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	if err := s.SetVar(ctx, "s", "gone", []byte(`1`), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx, "l", "o", time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	entered, release := holdNextCommit(s)
	before := s.Commits()
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	added := make(chan bool, 2)
	write := func(f func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- f() }()
	}
	// A log's write leads, and its commit is held.
	write(func() error { _, err := s.Append(ctx, "l", "o", []byte("e1")); return err })
	<-entered
	for i := range 3 {
		write(func() error { return s.SetVar(ctx, "s", fmt.Sprint("v", i), []byte(`2`), time.Hour) })
	}
	for range 2 {
		write(func() error {
			ok, err := s.AddVar(ctx, "s", "once", []byte(`3`), time.Hour)
			added <- ok
			return err
		})
	}
	write(func() error { return s.DeleteVar(ctx, "s", "gone") })
	// Not waitQueued: writes that do not queue must not keep the held
	// commit from ending the test.
	for deadline := time.Now().Add(10 * time.Second); bolt.Queued(s) < 6 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errs)
	close(added)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Commits() - before; n != 2 {
		t.Fatalf("%d commits for a held write and 6 of variables, want 2: the held one, then the 6 queued behind it together", n)
	}
	n := 0
	for ok := range added {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of two AddVars of one name added it, want 1", n)
	}
	for name, want := range map[string]bool{"v0": true, "v2": true, "once": true, "gone": false} {
		if _, ok, err := s.GetVar(ctx, "s", name); err != nil || ok != want {
			t.Errorf("GetVar(%s) = %v, %v; want %v", name, ok, err, want)
		}
	}
}
