// Package bolt is a store in one file (go.etcd.io/bbolt), so a single
// replica keeps its idempotency records and session variables across a
// restart. The file is locked: one process at a time may open it. What it
// holds is bounded in bytes (Options.MaxBytes, MaxLogBytes; see bounds.go);
// bbolt never shrinks the file, but reuses the pages freed.
//
// Like every backend it imports only store/ (with store/internal/record) and
// its driver: never tools/, engine/, service/, sources/ or gen/.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/internal/fanout"
	"github.com/toolwire/toolwire/store/internal/record"
	bbolt "go.etcd.io/bbolt"
)

var (
	recordsBucket = []byte("idempotency")
	varsBucket    = []byte("session")
)

// Options tune a Store; the zero value means the defaults.
type Options struct {
	// LockTimeout is how long Open waits for another process to let go of
	// the file. Default 5s.
	LockTimeout time.Duration
	// SweepInterval is how often expired entries are deleted from the
	// file; they are ignored on reading anyway. Default 1m.
	SweepInterval time.Duration
	// MaxLogEntries bounds the entries each event log keeps: past it, the
	// oldest go, and reading from before them is store.ErrDropped. Default
	// DefaultMaxLogEntries.
	MaxLogEntries int
	// MaxBytes bounds what the idempotency records and session variables
	// hold together in the file (keys, results and values, and about 130
	// bytes each besides): past it, the least recently written go first,
	// as in the memory store. Default DefaultMaxBytes (256 MiB).
	MaxBytes int64
	// MaxLogBytes bounds what every event log holds together (entries and
	// names, about 60 bytes an entry besides): past it, the logs finished
	// longest ago are dropped before their TTL, as if expired. A log
	// still being written is never dropped, nor the one finished last.
	// Default DefaultMaxLogBytes (256 MiB).
	MaxLogBytes int64
}

// Store keeps records and variables in a bbolt file.
type Store struct {
	db      *bbolt.DB
	waiters record.Waiters
	clock   *record.Clock // the time of every record, variable and log
	stop    chan struct{}
	swept   sync.WaitGroup
	once    sync.Once

	maxBytes    int64 // Options.MaxBytes; see bounds.go
	maxLogBytes int64 // Options.MaxLogBytes

	maxLog     int
	logWaiters record.Waiters
	gc         committer // the event logs' writes, grouped into shared commits

	signals fanout.Hub // see signals.go

	warnings []string // Open's: see Warnings
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if need be) the store in the file at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 5 * time.Second
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Minute
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxLogBytes <= 0 {
		opts.MaxLogBytes = DefaultMaxLogBytes
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("bolt store %s: the file is locked by another process", path)
		}
		return nil, fmt.Errorf("bolt store %s: %w", path, err)
	}
	var trimmed dropped
	err = db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(recordsBucket); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(logsBucket); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(varsBucket); err != nil {
			return err
		}
		_, d, err := checkBounds(tx, opts.MaxBytes, opts.MaxLogBytes)
		trimmed = d
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("bolt store %s: %w", path, err)
	}
	if opts.MaxLogEntries <= 0 {
		opts.MaxLogEntries = DefaultMaxLogEntries
	}
	s := &Store{clock: record.NewClock(), db: db, stop: make(chan struct{}), maxLog: opts.MaxLogEntries, maxBytes: opts.MaxBytes, maxLogBytes: opts.MaxLogBytes}
	s.warnings = trimmed.warnings(path, opts.MaxBytes, opts.MaxLogBytes)
	s.swept.Add(1)
	go s.sweepEvery(opts.SweepInterval)
	return s, nil
}

// Warnings returns what Open found that breaks toolwire's promises, one
// line each, for the operator (serve logs them): what it dropped to bring
// a file over its bounds within them.
func (s *Store) Warnings() []string { return slices.Clone(s.warnings) }

// readRecord returns the live record at key in b, or nil.
func readRecord(b *bbolt.Bucket, key string, now time.Time) (*record.Record, error) {
	v := b.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	var r record.Record
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("bolt store: record %q: %w", key, err)
	}
	if r.Expired(now) {
		return nil, nil
	}
	return &r, nil
}

// writeRecord writes r at key as the most recently written entry, within
// the bound in bytes.
func (s *Store) writeRecord(tx *bbolt.Tx, key string, r *record.Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return putEntry(tx, kindRecord, []byte(key), v, s.maxBytes)
}

// Claim implements store.Idempotency. A completed or in-flight record is
// read in a read-only transaction, which needs no write to disk: replays
// are cheap.
func (s *Store) Claim(_ context.Context, key, fp, owner string, lease, ttl time.Duration) (store.Claim, error) {
	var c store.Claim
	err := s.db.View(func(tx *bbolt.Tx) error {
		r, err := readRecord(tx.Bucket(recordsBucket), key, s.clock.Now())
		if err != nil || r == nil || !(r.Done || r.InFlight(s.clock.Now())) {
			return err
		}
		c, _ = record.Claim(r, s.clock.Now(), fp, owner, lease, ttl)
		return nil
	})
	if err != nil || c.State != 0 {
		return c, err
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(recordsBucket)
		now := s.clock.Now()
		r, err := readRecord(b, key, now)
		if err != nil {
			return err
		}
		var rec *record.Record
		c, rec = record.Claim(r, now, fp, owner, lease, ttl)
		if rec == nil {
			return nil
		}
		return s.writeRecord(tx, key, rec)
	})
	if err == nil && c.State == store.Claimed {
		s.waiters.Wake(key)
	}
	return c, err
}

// update runs fn on owner's record at key and writes it back, or deletes it
// when fn returns nil.
func (s *Store) update(key, owner string, fn func(r *record.Record, now time.Time) *record.Record) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(recordsBucket)
		now := s.clock.Now()
		r, err := readRecord(b, key, now)
		if err != nil {
			return err
		}
		if !record.Owned(r, owner) {
			return store.ErrLeaseLost
		}
		if r = fn(r, now); r == nil {
			return deleteEntry(tx, kindRecord, []byte(key))
		}
		return s.writeRecord(tx, key, r)
	})
}

// Renew implements store.Idempotency.
func (s *Store) Renew(_ context.Context, key, owner string, lease time.Duration) error {
	return s.update(key, owner, func(r *record.Record, now time.Time) *record.Record {
		r.LeaseUntil = now.Add(lease).UnixNano()
		return r
	})
}

// Complete implements store.Idempotency.
func (s *Store) Complete(_ context.Context, key, owner string, result []byte, ttl time.Duration) error {
	err := s.update(key, owner, func(r *record.Record, now time.Time) *record.Record {
		r.Done, r.Result, r.Expires = true, result, now.Add(ttl).UnixNano()
		return r
	})
	if err == nil {
		s.waiters.Wake(key)
	}
	return err
}

// Release implements store.Idempotency.
func (s *Store) Release(_ context.Context, key, owner string) error {
	err := s.update(key, owner, func(*record.Record, time.Time) *record.Record { return nil })
	if err == nil {
		s.waiters.Wake(key)
	}
	return err
}

// Wait implements store.Idempotency. Only this process can have the file
// open, so in-process wake-ups see every change; a lease that runs out (its
// owner died with an earlier process) is waited for with a timer.
func (s *Store) Wait(ctx context.Context, key string) error {
	woken, done := s.waiters.Chan(key)
	defer done()
	var wait time.Duration
	inFlight := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		now := s.clock.Now()
		r, err := readRecord(tx.Bucket(recordsBucket), key, now)
		if err == nil && r != nil && r.InFlight(now) {
			inFlight, wait = true, time.Unix(0, r.LeaseUntil).Sub(now)
		}
		return err
	})
	if err != nil || !inFlight {
		return err
	}
	return record.Wait(ctx, woken, wait)
}

// A variable is stored as its expiry (Unix nanoseconds, 8 bytes) and value.
func varKey(scope, name string) []byte { return []byte(store.ScopedName(scope, name)) }

// GetVar implements store.Vars.
func (s *Store) GetVar(_ context.Context, scope, name string) (value []byte, ok bool, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(varsBucket).Get(varKey(scope, name))
		if len(v) < 8 || s.clock.Now().UnixNano() >= int64(binary.BigEndian.Uint64(v)) {
			return nil
		}
		value, ok = append([]byte(nil), v[8:]...), true
		return nil
	})
	return value, ok, err
}

// SetVar implements store.Vars.
func (s *Store) SetVar(_ context.Context, scope, name string, value []byte, ttl time.Duration) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(value)), uint64(s.clock.Now().Add(ttl).UnixNano()))
	v = append(v, value...)
	return s.grouped(func(tx *bbolt.Tx) error {
		return putEntry(tx, kindVar, varKey(scope, name), v, s.maxBytes)
	})
}

// AddVar implements store.Vars.
func (s *Store) AddVar(_ context.Context, scope, name string, value []byte, ttl time.Duration) (added bool, err error) {
	now := s.clock.Now()
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(value)), uint64(now.Add(ttl).UnixNano()))
	v = append(v, value...)
	err = s.grouped(func(tx *bbolt.Tx) error {
		added = false // run again, its group having failed
		k := varKey(scope, name)
		if old := tx.Bucket(varsBucket).Get(k); len(old) >= 8 && now.UnixNano() < int64(binary.BigEndian.Uint64(old)) {
			return nil
		}
		added = true
		return putEntry(tx, kindVar, k, v, s.maxBytes)
	})
	return added && err == nil, err
}

// DeleteVar implements store.Vars.
func (s *Store) DeleteVar(_ context.Context, scope, name string) error {
	return s.grouped(func(tx *bbolt.Tx) error {
		return deleteEntry(tx, kindVar, varKey(scope, name))
	})
}

func (s *Store) sweepEvery(d time.Duration) {
	defer s.swept.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.Sweep()
		}
	}
}

// Sweep deletes expired records, variables and event logs from the file.
func (s *Store) Sweep() error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		now := s.clock.Now()
		if err := sweepLogs(tx, now); err != nil {
			return err
		}
		var dead [][]byte
		err := tx.Bucket(recordsBucket).ForEach(func(k, v []byte) error {
			var r record.Record
			if json.Unmarshal(v, &r) != nil || r.Expired(now) {
				dead = append(dead, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := deleteEntry(tx, kindRecord, k); err != nil {
				return err
			}
		}
		dead = dead[:0]
		err = tx.Bucket(varsBucket).ForEach(func(k, v []byte) error {
			if len(v) < 8 || now.UnixNano() >= int64(binary.BigEndian.Uint64(v)) {
				dead = append(dead, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := deleteEntry(tx, kindVar, k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Bytes returns what the records and variables hold, and what the event
// logs hold, as MaxBytes and MaxLogBytes count them.
func (s *Store) Bytes() (entries, logs int64, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		entries, logs = getCount(tx, bytesKey), getCount(tx, logBytesKey)
		return nil
	})
	return entries, logs, err
}

// Close implements io.Closer.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.swept.Wait()
		s.signals.Close()
		err = s.db.Close()
	})
	return err
}
