package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"iter"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/internal/record"
	bbolt "go.etcd.io/bbolt"
)

// An event log is a bucket of its own inside logsBucket, named by the log:
// its state under metaKey, its entries under their index (8 bytes, big
// endian), so they sort in order. Readers wait on in-process waiters: the
// file is one process's, so nobody else appends.
var (
	logsBucket = []byte("eventlog")
	metaKey    = []byte("m")
)

// DefaultMaxLogEntries bounds each event log of a store whose Options leave
// MaxLogEntries unset.
const DefaultMaxLogEntries = 100_000

func entryKey(i uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], i)
	return k[:]
}

// readLog returns the live log in b (nil when b is nil or it has expired).
func readLog(b *bbolt.Bucket, now time.Time) (*record.Log, error) {
	if b == nil {
		return nil, nil
	}
	var l record.Log
	if err := json.Unmarshal(b.Get(metaKey), &l); err != nil {
		return nil, err
	}
	if l.Expired(now) {
		return nil, nil
	}
	return &l, nil
}

func writeLog(b *bbolt.Bucket, l *record.Log) error {
	v, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return b.Put(metaKey, v)
}

// Open implements store.EventLog.
func (s *Store) Open(_ context.Context, name, owner string, lease, ttl time.Duration, data ...[]byte) error {
	return s.open(name, owner, lease, ttl, false, data)
}

// OpenFinished implements store.LogOpenFinisher: one commit, shared with
// the writes queued beside it, where Open and Finish are two.
func (s *Store) OpenFinished(_ context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	return s.open(name, owner, 0, ttl, true, data)
}

// open creates the log name with data as its entries, under a lease or,
// finished, with none.
func (s *Store) open(name, owner string, lease, ttl time.Duration, finished bool, data [][]byte) error {
	err := s.grouped(func(tx *bbolt.Tx) error {
		logs := tx.Bucket(logsBucket)
		now := s.clock.Now()
		l, err := readLog(logs.Bucket([]byte(name)), now)
		if err != nil {
			return err
		}
		if l != nil {
			return store.ErrLogExists
		}
		if err := dropLog(tx, []byte(name)); err != nil { // an expired log of that name
			return err
		}
		b, err := logs.CreateBucket([]byte(name))
		if err != nil {
			return err
		}
		if err := growLog(tx, []byte(name), logOverhead+int64(len(name))); err != nil {
			return err
		}
		l = record.NewLog(owner, now, lease, ttl)
		if finished {
			// Last among the finished before its entries may push
			// others out, as Finish does.
			if err := finishLog(tx, []byte(name)); err != nil {
				return err
			}
			l.Finish(now, ttl)
		}
		if err := s.appendEntries(b, name, l, data); err != nil {
			return err
		}
		return writeLog(b, l)
	})
	if err == nil && len(data) > 0 {
		s.logWaiters.Wake(name)
	}
	return err
}

// updateLog runs fn on owner's writable log name and writes its state
// back, in a transaction shared with the writes queued beside it.
func (s *Store) updateLog(name, owner string, fn func(b *bbolt.Bucket, l *record.Log, now time.Time) error) error {
	return s.grouped(func(tx *bbolt.Tx) error {
		b := tx.Bucket(logsBucket).Bucket([]byte(name))
		now := s.clock.Now()
		l, err := readLog(b, now)
		switch {
		case err != nil:
			return err
		case l == nil:
			return store.ErrLogNotFound
		case !l.Writable(owner):
			return store.ErrLeaseLost
		}
		if err := fn(b, l, now); err != nil {
			return err
		}
		return writeLog(b, l)
	})
}

// appendEntries puts data as the next entries of l, the log name in b,
// deleting the oldest past MaxLogEntries, then the logs finished longest
// ago past MaxLogBytes.
func (s *Store) appendEntries(b *bbolt.Bucket, name string, l *record.Log, data [][]byte) error {
	if len(data) == 0 {
		return nil
	}
	var delta int64
	for _, d := range data {
		i, drop := l.Append(s.maxLog)
		for k := range drop {
			key := entryKey(l.First - uint64(drop) + uint64(k))
			delta -= logEntryOverhead + int64(len(b.Get(key)))
			if err := b.Delete(key); err != nil {
				return err
			}
		}
		if err := b.Put(entryKey(i), d); err != nil {
			return err
		}
		delta += logEntryOverhead + int64(len(d))
	}
	if err := growLog(b.Tx(), []byte(name), delta); err != nil {
		return err
	}
	_, err := trimLogs(b.Tx(), s.maxLogBytes)
	return err
}

// Append implements store.EventLog.
func (s *Store) Append(_ context.Context, name, owner string, data ...[]byte) (uint64, error) {
	var i uint64
	err := s.updateLog(name, owner, func(b *bbolt.Bucket, l *record.Log, _ time.Time) error {
		err := s.appendEntries(b, name, l, data)
		i = l.Last
		return err
	})
	if err != nil {
		return 0, err
	}
	if len(data) > 0 {
		s.logWaiters.Wake(name)
	}
	return i, nil
}

// After implements store.EventLog. It reads the entries in one read
// transaction, then yields them.
func (s *Store) After(_ context.Context, name string, index uint64) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		var entries []store.Entry
		err := s.db.View(func(tx *bbolt.Tx) error {
			b := tx.Bucket(logsBucket).Bucket([]byte(name))
			l, err := readLog(b, s.clock.Now())
			switch {
			case err != nil:
				return err
			case l == nil:
				return store.ErrLogNotFound
			case index >= l.Last:
				return nil
			case index+1 < l.First:
				return store.ErrDropped
			}
			c := b.Cursor()
			for k, v := c.Seek(entryKey(index + 1)); k != nil && len(k) == 8; k, v = c.Next() {
				entries = append(entries, store.Entry{Index: binary.BigEndian.Uint64(k), Data: append([]byte(nil), v...)})
			}
			return nil
		})
		if err != nil {
			yield(store.Entry{}, err)
			return
		}
		for _, e := range entries {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// WaitLog implements store.EventLog.
func (s *Store) WaitLog(ctx context.Context, name string, index uint64) error {
	woken, done := s.logWaiters.Chan(name)
	defer done()
	var wait time.Duration
	ready := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		now := s.clock.Now()
		l, err := readLog(tx.Bucket(logsBucket).Bucket([]byte(name)), now)
		if err != nil || l == nil || l.Last > index || l.Finished {
			ready = true
			return err
		}
		next := l.Next(now)
		if !l.Owned(now) {
			next = time.Unix(0, l.Expires)
		}
		wait = next.Sub(now)
		return nil
	})
	if err != nil || ready {
		return err
	}
	return record.Wait(ctx, woken, wait)
}

// RenewLog implements store.EventLog.
func (s *Store) RenewLog(_ context.Context, name, owner string, lease time.Duration) error {
	return s.updateLog(name, owner, func(_ *bbolt.Bucket, l *record.Log, now time.Time) error {
		l.Lease(now, lease)
		return nil
	})
}

// RenewLogs implements store.LogRenewer, in one transaction.
func (s *Store) RenewLogs(_ context.Context, owner string, lease time.Duration, names ...string) ([]error, error) {
	errs := make([]error, len(names))
	err := s.grouped(func(tx *bbolt.Tx) error {
		logs := tx.Bucket(logsBucket)
		now := s.clock.Now()
		for i, name := range names {
			b := logs.Bucket([]byte(name))
			l, err := readLog(b, now)
			switch {
			case err != nil:
				return err
			case l == nil:
				errs[i] = store.ErrLogNotFound
				continue
			case !l.Writable(owner):
				errs[i] = store.ErrLeaseLost
				continue
			}
			l.Lease(now, lease)
			if err := writeLog(b, l); err != nil {
				return err
			}
			errs[i] = nil // run again, its group having failed
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// TakeOver implements store.EventLog.
func (s *Store) TakeOver(_ context.Context, name, owner string, lease time.Duration) error {
	return s.grouped(func(tx *bbolt.Tx) error {
		b := tx.Bucket(logsBucket).Bucket([]byte(name))
		now := s.clock.Now()
		l, err := readLog(b, now)
		switch {
		case err != nil:
			return err
		case l == nil:
			return store.ErrLogNotFound
		case l.Finished || l.Owned(now):
			return store.ErrLeaseLost
		}
		l.Owner = owner
		l.Lease(now, lease)
		return writeLog(b, l)
	})
}

// Finish implements store.EventLog.
func (s *Store) Finish(_ context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	err := s.updateLog(name, owner, func(b *bbolt.Bucket, l *record.Log, now time.Time) error {
		// Last among the finished before its entries may push others out:
		// the log finished last is never dropped.
		if err := finishLog(b.Tx(), []byte(name)); err != nil {
			return err
		}
		if err := s.appendEntries(b, name, l, data); err != nil {
			return err
		}
		l.Finish(now, ttl)
		return nil
	})
	if err == nil {
		s.logWaiters.Wake(name)
	}
	return err
}

// Stat implements store.EventLog.
func (s *Store) Stat(_ context.Context, name string) (store.LogInfo, error) {
	var info store.LogInfo
	err := s.db.View(func(tx *bbolt.Tx) error {
		now := s.clock.Now()
		l, err := readLog(tx.Bucket(logsBucket).Bucket([]byte(name)), now)
		switch {
		case err != nil:
			return err
		case l == nil:
			return store.ErrLogNotFound
		}
		info = l.Info(now)
		return nil
	})
	return info, err
}

// sweepLogs deletes the expired event logs.
func sweepLogs(tx *bbolt.Tx, now time.Time) error {
	logs := tx.Bucket(logsBucket)
	var dead [][]byte
	err := logs.ForEachBucket(func(k []byte) error {
		l, err := readLog(logs.Bucket(k), now)
		if err != nil || l == nil {
			dead = append(dead, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range dead {
		if err := dropLog(tx, k); err != nil {
			return err
		}
	}
	return nil
}

// Logs returns how many event logs the file holds, expired ones included
// until they are swept.
func (s *Store) Logs() (n int, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(logsBucket).ForEachBucket(func([]byte) error { n++; return nil })
	})
	return n, err
}
