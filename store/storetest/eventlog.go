package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store"
)

// EventLog runs the event logs' contract against stores made by open, one
// per subtest; open should register their Close with t.Cleanup.
func EventLog[S store.EventLog](t *testing.T, open func(t *testing.T) S, opts ...Option) {
	c := newConfig(opts)
	ctx := context.Background()
	after := func(t *testing.T, s S, name string, index uint64) ([]store.Entry, error) {
		t.Helper()
		var got []store.Entry
		for e, err := range s.After(ctx, name, index) {
			if err != nil {
				return got, err
			}
			got = append(got, e)
		}
		return got, nil
	}
	appendN := func(t *testing.T, s S, name, owner string, from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			idx, err := s.Append(ctx, name, owner, []byte(fmt.Sprint("e", i)))
			if err != nil {
				t.Fatalf("Append %d: %v", i, err)
			}
			if idx != uint64(i) {
				t.Fatalf("Append %d got index %d", i, idx)
			}
		}
	}
	isErr := func(t *testing.T, what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s = %v, want %v", what, err, want)
		}
	}

	t.Run("AppendThenAfter", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long))
		appendN(t, s, "l", "a", 1, 3)
		for _, from := range []uint64{0, 1, 2, 3, 7} {
			got, err := after(t, s, "l", from)
			must(t, err)
			want := max(0, 3-int(from))
			if len(got) != want {
				t.Fatalf("After(%d) yielded %d entries, want %d", from, len(got), want)
			}
			for k, e := range got {
				if e.Index != from+1+uint64(k) || string(e.Data) != fmt.Sprint("e", e.Index) {
					t.Fatalf("After(%d)[%d] = %d %q", from, k, e.Index, e.Data)
				}
			}
		}
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if !infoIs(info, store.LogInfo{Last: 3, Owned: true}) {
			t.Fatalf("Stat = %+v", info)
		}
	})

	// A reader that has the last entry of a finished log (AttachBatch with
	// after_seq at BatchFinished) finds nothing after it, no error, and
	// no reason to wait: the log says it is finished.
	t.Run("AfterTheLastOfAFinishedLog", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long))
		appendN(t, s, "l", "a", 1, 3)
		must(t, s.Finish(ctx, "l", "a", long))
		got, err := after(t, s, "l", 3)
		must(t, err)
		if len(got) != 0 {
			t.Fatalf("After(3) of a finished log of 3 yielded %d entries", len(got))
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		must(t, s.WaitLog(wctx, "l", 3))
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if !infoIs(info, store.LogInfo{Last: 3, Finished: true}) {
			t.Fatalf("Stat = %+v, want Last 3, finished", info)
		}
		last, err := after(t, s, "l", 2)
		must(t, err)
		if len(last) != 1 || last[0].Index != 3 {
			t.Fatalf("After(2) = %v, want entry 3", last)
		}
	})

	t.Run("AfterStopsWhenTold", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long))
		appendN(t, s, "l", "a", 1, 5)
		n := 0
		for _, err := range s.After(ctx, "l", 0) {
			must(t, err)
			if n++; n == 2 {
				break
			}
		}
	})

	t.Run("OpenTwice", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long))
		isErr(t, "a second Open", s.Open(ctx, "l", "b", long, long), store.ErrLogExists)
	})

	t.Run("NotFound", func(t *testing.T) {
		s := open(t)
		_, err := after(t, s, "none", 0)
		isErr(t, "After of no log", err, store.ErrLogNotFound)
		_, err = s.Stat(ctx, "none")
		isErr(t, "Stat of no log", err, store.ErrLogNotFound)
		_, err = s.Append(ctx, "none", "a", []byte("x"))
		isErr(t, "Append to no log", err, store.ErrLogNotFound)
	})

	t.Run("OnlyTheOwnerWrites", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long))
		_, err := s.Append(ctx, "l", "b", []byte("x"))
		isErr(t, "Append by another owner", err, store.ErrLeaseLost)
		isErr(t, "RenewLog by another owner", s.RenewLog(ctx, "l", "b", long), store.ErrLeaseLost)
		isErr(t, "Finish by another owner", s.Finish(ctx, "l", "b", long), store.ErrLeaseLost)
		isErr(t, "TakeOver of a live lease", s.TakeOver(ctx, "l", "b", long), store.ErrLeaseLost)
	})

	t.Run("FinishedThenExpired", func(t *testing.T) {
		s := open(t)
		// What a finished log answers is asked of one that lives long
		// (on a real clock, four round trips did not always fit in a
		// short TTL on a loaded machine); its expiry, of another.
		must(t, s.Open(ctx, "l", "a", long, long))
		appendN(t, s, "l", "a", 1, 2)
		must(t, s.Finish(ctx, "l", "a", long))
		must(t, s.Open(ctx, "m", "a", long, long))
		appendN(t, s, "m", "a", 1, 2)
		must(t, s.Finish(ctx, "m", "a", short))
		_, err := s.Append(ctx, "l", "a", []byte("x"))
		isErr(t, "Append after Finish", err, store.ErrLeaseLost)
		isErr(t, "TakeOver of a finished log", s.TakeOver(ctx, "l", "b", long), store.ErrLeaseLost)
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if !infoIs(info, store.LogInfo{Last: 2, Finished: true}) {
			t.Fatalf("Stat after Finish = %+v", info)
		}
		got, err := after(t, s, "l", 0)
		must(t, err)
		if len(got) != 2 {
			t.Fatalf("After(0) of a finished log yielded %d entries, want 2", len(got))
		}
		c.advance(3 * short)
		_, err = s.Stat(ctx, "m")
		isErr(t, "Stat after the TTL", err, store.ErrLogNotFound)
		_, err = after(t, s, "m", 0)
		isErr(t, "After after the TTL", err, store.ErrLogNotFound)
		must(t, s.Open(ctx, "m", "c", long, long)) // the name is free again
		if _, err := s.Stat(ctx, "l"); err != nil {
			t.Errorf("Stat of the log finished to live long, after the other's TTL: %v", err)
		}
	})

	// A log written whole, opened finished (store.LogOpenFinisher): what
	// a quick detached batch stores in one write.
	t.Run("OpenFinished", func(t *testing.T) {
		s := open(t)
		of, ok := any(s).(store.LogOpenFinisher)
		if !ok {
			t.Fatalf("%T does not write a whole log in one write (store.LogOpenFinisher)", s)
		}
		must(t, of.OpenFinished(ctx, "l", "a", long, []byte("e1"), []byte("e2"), []byte("e3")))
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if !infoIs(info, store.LogInfo{Last: 3, Finished: true}) || info.Opened.IsZero() {
			t.Fatalf("Stat of a log opened finished = %+v, want Last 3, finished, its opening noted", info)
		}
		got, err := after(t, s, "l", 1)
		must(t, err)
		if len(got) != 2 || got[0].Index != 2 || string(got[1].Data) != "e3" {
			t.Fatalf("After(1) = %v, want entries 2 and 3", got)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		must(t, s.WaitLog(wctx, "l", 3)) // finished: nothing to wait for
		_, err = s.Append(ctx, "l", "a", []byte("x"))
		isErr(t, "Append to a log opened finished", err, store.ErrLeaseLost)
		isErr(t, "RenewLog of a log opened finished", s.RenewLog(ctx, "l", "a", long), store.ErrLeaseLost)
		isErr(t, "TakeOver of a log opened finished", s.TakeOver(ctx, "l", "b", long), store.ErrLeaseLost)
		isErr(t, "Open of its name", s.Open(ctx, "l", "b", long, long), store.ErrLogExists)
		isErr(t, "OpenFinished of its name", of.OpenFinished(ctx, "l", "b", long), store.ErrLogExists)
		must(t, s.Open(ctx, "live", "a", long, long))
		isErr(t, "OpenFinished of a live log's name", of.OpenFinished(ctx, "live", "b", long), store.ErrLogExists)
		if info, err := s.Stat(ctx, "live"); err != nil || !info.Owned || info.Finished {
			t.Fatalf("the live log after a refused OpenFinished: %+v, %v", info, err)
		}
		// It lives ttl, as a finished log does.
		must(t, of.OpenFinished(ctx, "m", "a", short, []byte("e1")))
		c.advance(3 * short)
		_, err = s.Stat(ctx, "m")
		isErr(t, "Stat after the TTL", err, store.ErrLogNotFound)
		if _, err := s.Stat(ctx, "l"); err != nil {
			t.Errorf("Stat of the log opened finished to live long, after the other's TTL: %v", err)
		}
	})

	t.Run("LostOwnerIsTakenOver", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", short, long))
		appendN(t, s, "l", "a", 1, 1)
		c.advance(3 * short)
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if info.Owned || info.Finished || info.Last != 1 {
			t.Fatalf("Stat after the lease = %+v, want unowned, unfinished, last 1", info)
		}
		// Replicas race to take it over: exactly one wins.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []string
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprint("r", i)
				if err := s.TakeOver(ctx, "l", owner, long); err == nil {
					mu.Lock()
					won = append(won, owner)
					mu.Unlock()
				} else if !errors.Is(err, store.ErrLeaseLost) {
					t.Errorf("TakeOver: %v", err)
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("%d owners took the log over (%v), want 1", len(won), won)
		}
		_, err = s.Append(ctx, "l", "a", []byte("x"))
		isErr(t, "Append by the lost owner", err, store.ErrLeaseLost)
		appendN(t, s, "l", won[0], 2, 1)
		must(t, s.Finish(ctx, "l", won[0], long))
	})

	t.Run("RenewKeepsItOwned", func(t *testing.T) {
		s := open(t)
		// Each renewal must land within the lease before it: five
		// shorts, renewed every short, past the first lease.
		must(t, s.Open(ctx, "l", "a", 5*short, long))
		for range 6 {
			c.advance(short)
			must(t, s.RenewLog(ctx, "l", "a", 5*short))
		}
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if !info.Owned {
			t.Fatalf("Stat after renewals = %+v, want owned", info)
		}
	})

	// One write renews many logs of one owner (store.LogRenewer), with
	// an answer for each: a replica renews those of all the detached
	// batches it runs at once.
	t.Run("RenewManyAtOnce", func(t *testing.T) {
		s := open(t)
		r, ok := any(s).(store.LogRenewer)
		if !ok {
			t.Fatalf("%T does not renew logs in one write (store.LogRenewer)", s)
		}
		// Leases of five shorts, renewed every short past the first (on
		// a real clock each renewal must land within the last lease).
		for _, name := range []string{"live1", "live2", "finished"} {
			must(t, s.Open(ctx, name, "a", 5*short, long))
		}
		must(t, s.Open(ctx, "other", "b", 5*short, long))
		must(t, s.Finish(ctx, "finished", "a", long))
		names := []string{"live1", "other", "unknown", "finished", "live2"}
		want := []error{nil, store.ErrLeaseLost, store.ErrLogNotFound, store.ErrLeaseLost, nil}
		for range 6 {
			c.advance(short)
			errs, err := r.RenewLogs(ctx, "a", 5*short, names...)
			must(t, err)
			if len(errs) != len(names) {
				t.Fatalf("RenewLogs gave %d answers for %d logs", len(errs), len(names))
			}
			for i, err := range errs {
				if !errors.Is(err, want[i]) || (want[i] == nil && err != nil) {
					t.Fatalf("RenewLogs answered %v for %s, want %v", err, names[i], want[i])
				}
			}
		}
		for _, name := range []string{"live1", "live2"} {
			info, err := s.Stat(ctx, name)
			must(t, err)
			if !info.Owned {
				t.Fatalf("Stat(%s) after renewals = %+v, want owned", name, info)
			}
		}
		if info, err := s.Stat(ctx, "other"); err != nil || info.Owned {
			t.Fatalf("Stat(other), renewed by no one = %+v, %v; want its lease run out", info, err)
		}
		errs, err := r.RenewLogs(ctx, "a", 2*short)
		if err != nil || len(errs) != 0 {
			t.Fatalf("RenewLogs of no log = %v, %v; want nothing", errs, err)
		}
	})

	t.Run("UnfinishedLogOfADeadOwnerExpires", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", short, short))
		appendN(t, s, "l", "a", 1, 1)
		c.advance(5 * short)
		_, err := s.Stat(ctx, "l")
		isErr(t, "Stat after lease and TTL", err, store.ErrLogNotFound)
	})

	t.Run("WaitWakesOnAppend", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long))
		appendN(t, s, "l", "a", 1, 1)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		// Wait may return early: look again until the entry is there.
		done := make(chan error, 1)
		go func() {
			for {
				if err := s.WaitLog(wctx, "l", 1); err != nil {
					done <- err
					return
				}
				info, err := s.Stat(wctx, "l")
				if err != nil || info.Last > 1 {
					done <- err
					return
				}
			}
		}()
		appendN(t, s, "l", "a", 2, 1)
		must(t, <-done)
		// An entry already there: Wait returns at once.
		must(t, s.WaitLog(wctx, "l", 0))
	})

	t.Run("WaitEndsWithContext", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long))
		wctx, cancel := context.WithCancel(ctx)
		cancel()
		for {
			// It may return nil early; a done context ends it with its error.
			if err := s.WaitLog(wctx, "l", 0); err != nil {
				isErr(t, "WaitLog with a cancelled context", err, context.Canceled)
				return
			}
		}
	})

	entries := func(from, n int) [][]byte {
		var data [][]byte
		for i := from; i < from+n; i++ {
			data = append(data, []byte(fmt.Sprint("e", i)))
		}
		return data
	}
	// wantEntries checks that the log holds e1 … en, in order (those it
	// keeps, when it keeps at most c.maxEntries).
	wantEntries := func(t *testing.T, s S, name string, n int) {
		t.Helper()
		from := 0
		if c.maxEntries > 0 && n > c.maxEntries {
			from = n - c.maxEntries
		}
		got, err := after(t, s, name, uint64(from))
		must(t, err)
		if len(got) != n-from {
			t.Fatalf("After(%d) yielded %d entries, want %d", from, len(got), n-from)
		}
		for k, e := range got {
			if i := from + k + 1; e.Index != uint64(i) || string(e.Data) != fmt.Sprint("e", i) {
				t.Fatalf("entry %d = %d %q, want %d %q", k, e.Index, e.Data, i, fmt.Sprint("e", i))
			}
		}
	}

	// Open, Append and Finish each write a group of entries at once: the
	// group commit of detached batches' events.
	t.Run("GroupsOfEntries", func(t *testing.T) {
		s := open(t)
		before := time.Now()
		must(t, s.Open(ctx, "l", "a", long, long, entries(1, 2)...))
		idx, err := s.Append(ctx, "l", "a", entries(3, 2)...)
		must(t, err)
		if idx != 4 {
			t.Fatalf("Append of 2 after 2 returned %d, want 4 (the last)", idx)
		}
		idx, err = s.Append(ctx, "l", "a")
		must(t, err)
		if idx != 4 {
			t.Fatalf("Append of none returned %d, want 4", idx)
		}
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if !infoIs(info, store.LogInfo{Last: 4, Owned: true}) {
			t.Fatalf("Stat = %+v", info)
		}
		// Opened is the opener's clock, which the store may keep in ms.
		if info.Opened.Before(before.Add(-time.Millisecond)) || info.Opened.After(time.Now().Add(time.Millisecond)) {
			t.Fatalf("Stat's Opened = %v, want between %v and now", info.Opened, before)
		}
		must(t, s.Finish(ctx, "l", "a", long, entries(5, 1)...))
		wantEntries(t, s, "l", 5)
		info, err = s.Stat(ctx, "l")
		must(t, err)
		if !infoIs(info, store.LogInfo{Last: 5, Finished: true}) {
			t.Fatalf("Stat after Finish = %+v", info)
		}
		_, err = s.Append(ctx, "l", "a", entries(6, 2)...)
		isErr(t, "Append of a group after Finish", err, store.ErrLeaseLost)
		wantEntries(t, s, "l", 5)
	})

	// A group the store refuses leaves nothing of it behind.
	t.Run("RefusedGroupsWriteNothing", func(t *testing.T) {
		s := open(t)
		must(t, s.Open(ctx, "l", "a", long, long, entries(1, 1)...))
		_, err := s.Append(ctx, "l", "b", entries(2, 3)...)
		isErr(t, "Append of a group by another owner", err, store.ErrLeaseLost)
		isErr(t, "Finish with a group by another owner", s.Finish(ctx, "l", "b", long, entries(2, 3)...), store.ErrLeaseLost)
		isErr(t, "Open of an open log with a group", s.Open(ctx, "l", "b", long, long, entries(2, 3)...), store.ErrLogExists)
		_, err = s.Append(ctx, "none", "a", entries(1, 2)...)
		isErr(t, "Append of a group to no log", err, store.ErrLogNotFound)
		wantEntries(t, s, "l", 1)
		info, err := s.Stat(ctx, "l")
		must(t, err)
		if !infoIs(info, store.LogInfo{Last: 1, Owned: true}) {
			t.Fatalf("Stat = %+v", info)
		}
		_, err = s.Stat(ctx, "none")
		isErr(t, "Stat of no log after a refused group", err, store.ErrLogNotFound)
	})

	// Many logs written at once (each by its own owner, groups of varied
	// sizes), and one log whose owner appends from several goroutines:
	// every log's entries are dense and in order, and each group's entries
	// are contiguous. A store that groups concurrent writes into shared
	// transactions must keep all of this.
	t.Run("ConcurrentGroups", func(t *testing.T) {
		s := open(t)
		const logs, groups = 16, 12
		var wg sync.WaitGroup
		for l := range logs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name, owner := fmt.Sprint("log", l), fmt.Sprint("o", l)
				if err := s.Open(ctx, name, owner, long, long, entries(1, 1)...); err != nil {
					t.Errorf("Open %s: %v", name, err)
					return
				}
				next := 2
				for g := range groups {
					n := 1 + (l+g)%4
					idx, err := s.Append(ctx, name, owner, entries(next, n)...)
					if err != nil || idx != uint64(next+n-1) {
						t.Errorf("Append to %s of %d from %d = %d, %v", name, n, next, idx, err)
						return
					}
					next += n
				}
				if err := s.Finish(ctx, name, owner, long, entries(next, 2)...); err != nil {
					t.Errorf("Finish %s: %v", name, err)
				}
			}()
		}
		must(t, s.Open(ctx, "shared", "a", long, long))
		var mu sync.Mutex
		lasts := map[uint64]bool{}
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range groups {
					idx, err := s.Append(ctx, "shared", "a", entries(0, 3)...)
					if err != nil {
						t.Errorf("Append to shared: %v", err)
						return
					}
					mu.Lock()
					lasts[idx] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for l := range logs {
			n := 1 + 2
			for g := range groups {
				n += 1 + (l+g)%4
			}
			wantEntries(t, s, fmt.Sprint("log", l), n)
		}
		// Groups of 3 that were never cut in two end at 3, 6, 9, …
		for k := uint64(1); k <= 8*groups; k++ {
			if !lasts[3*k] {
				t.Fatalf("no group of the shared log ended at %d (the groups' last entries: %v)", 3*k, lasts)
			}
		}
	})

	if c.maxEntries > 0 {
		// A group larger than the bound keeps its newest entries.
		t.Run("GroupPastTheBound", func(t *testing.T) {
			s := open(t)
			n := c.maxEntries + 2
			must(t, s.Open(ctx, "l", "a", long, long, entries(1, n)...))
			_, err := after(t, s, "l", 0)
			isErr(t, "After(0) of a group past the bound", err, store.ErrDropped)
			got, err := after(t, s, "l", 2)
			must(t, err)
			if len(got) != c.maxEntries || got[0].Index != 3 || string(got[len(got)-1].Data) != fmt.Sprint("e", n) {
				t.Fatalf("After(2) = %v, want %d entries from 3 to %d", got, c.maxEntries, n)
			}
		})
		t.Run("Dropped", func(t *testing.T) {
			s := open(t)
			must(t, s.Open(ctx, "l", "a", long, long))
			n := c.maxEntries + 3
			appendN(t, s, "l", "a", 1, n)
			got, err := after(t, s, "l", 0)
			isErr(t, "After(0) past the bound", err, store.ErrDropped)
			if len(got) != 0 {
				t.Fatalf("After(0) yielded %d entries before ErrDropped, want none", len(got))
			}
			got, err = after(t, s, "l", 3)
			must(t, err)
			if len(got) != c.maxEntries || got[0].Index != 4 {
				t.Fatalf("After(3) yielded %d entries from %v, want %d from 4", len(got), got, c.maxEntries)
			}
		})
	}
}

// infoIs compares a log's state but for Opened, which Stat reports but a
// test cannot predict.
func infoIs(got, want store.LogInfo) bool {
	got.Opened, want.Opened = time.Time{}, time.Time{}
	return got == want
}
