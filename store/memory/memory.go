// Package memory is the default store: idempotency records, session
// variables and event logs in this process's memory, bounded in count and
// in bytes, each with a TTL. It
// does not survive a restart and is not shared between replicas; use the
// bolt or redis store for that.
//
// Like every backend it imports only store/ (with store/internal/record):
// never tools/, engine/, service/, sources/ or gen/.
package memory

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/internal/fanout"
	"github.com/toolwire/toolwire/store/internal/record"
)

// DefaultMaxEntries bounds a store whose Options leave MaxEntries unset.
const DefaultMaxEntries = 100_000

// DefaultMaxBytes bounds the records and variables of a store whose
// Options leave MaxBytes unset, and DefaultMaxLogBytes its event logs.
const (
	DefaultMaxBytes    = 256 << 20
	DefaultMaxLogBytes = 256 << 20
)

// entryOverhead is what an entry costs beside its strings and bytes: its
// map slot, list element, entry and record.
const entryOverhead = 192

// Options tune a Store; the zero value means the defaults.
type Options struct {
	// MaxEntries bounds the records and variables kept together. When it
	// is reached, expired entries go first, then the least recently
	// written: a record evicted early can let a retry run the call again,
	// so size it above the calls with keys expected within the TTL.
	// Default DefaultMaxEntries.
	MaxEntries int
	// MaxLogEntries bounds the entries each event log keeps: past it, the
	// oldest go, and reading from before them is store.ErrDropped. Default
	// DefaultMaxLogEntries.
	MaxLogEntries int
	// MaxBytes bounds what the records and variables hold together (their
	// keys, results and values, and about 200 bytes each besides), evicted
	// as MaxEntries evicts: a count alone let 100,000 records of 256 KiB
	// results hold 25 GiB. Default DefaultMaxBytes.
	MaxBytes int
	// MaxLogBytes bounds what every event log holds together (entries,
	// names, and about 100 bytes an entry besides): past it, the logs
	// finished longest ago are dropped before their TTL, as if expired. A
	// log still being written is never dropped; what those hold is bounded
	// by their writers (the engine's batches). Default DefaultMaxLogBytes.
	MaxLogBytes int
}

// Store keeps records and variables in memory.
type Store struct {
	max      int
	maxBytes int
	waiters  record.Waiters
	clock    *record.Clock // the time of every record and entry

	mu      sync.Mutex
	closed  bool
	entries map[string]*list.Element // of *entry; keys from idemKey or varKey
	order   list.List                // least recently written first
	bytes   int                      // what entries hold, by entry.size

	maxLog      int
	maxLogBytes int
	logs        map[string]*memLog // event logs by name; see eventlog.go
	logBytes    int                // what logs hold, by memLog.bytes
	finished    list.List          // of *memLog: the finished logs, in the order they finished
	swept       time.Time          // when expired logs were last swept
	logWaiters  record.Waiters

	signals fanout.Hub // see signals.go
}

type entry struct {
	key     string
	rec     *record.Record // an idempotency record, or
	value   []byte         // a session variable's value
	expires time.Time
}

// size is what e holds, for MaxBytes.
func (e *entry) size() int {
	n := entryOverhead + len(e.key) + len(e.value)
	if e.rec != nil {
		n += len(e.rec.Fingerprint) + len(e.rec.Owner) + len(e.rec.Result)
	}
	return n
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New(opts Options) *Store {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxLogEntries <= 0 {
		opts.MaxLogEntries = DefaultMaxLogEntries
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxLogBytes <= 0 {
		opts.MaxLogBytes = DefaultMaxLogBytes
	}
	return &Store{clock: record.NewClock(), max: opts.MaxEntries, maxBytes: opts.MaxBytes, entries: make(map[string]*list.Element),
		maxLog: opts.MaxLogEntries, maxLogBytes: opts.MaxLogBytes, logs: make(map[string]*memLog)}
}

// Records and variables share one map; the prefix keeps them apart.
func idemKey(key string) string        { return "i" + key }
func varKey(scope, name string) string { return "v" + store.ScopedName(scope, name) }

// get returns the live entry at k; an expired one is dropped. s.mu is held.
func (s *Store) get(k string, now time.Time) *entry {
	el, ok := s.entries[k]
	if !ok {
		return nil
	}
	e := el.Value.(*entry)
	if !now.Before(e.expires) {
		s.remove(el)
		return nil
	}
	return e
}

// put stores e as the most recently written entry, evicting to stay within
// the bounds, and drops the expired entries at the front of the write
// order, so that what outlived its TTL goes at the next write rather than
// only when a bound is reached. s.mu is held.
func (s *Store) put(e *entry, now time.Time) {
	if el, ok := s.entries[e.key]; ok {
		s.bytes += e.size() - el.Value.(*entry).size()
		el.Value = e
		s.order.MoveToBack(el)
	} else {
		s.entries[e.key] = s.order.PushBack(e)
		s.bytes += e.size()
	}
	// e is at the back: the front is another entry while there are two.
	for s.order.Len() > 1 && (len(s.entries) > s.max || s.bytes > s.maxBytes) {
		s.evict(now)
	}
	for el := s.order.Front(); el != nil && !now.Before(el.Value.(*entry).expires); el = s.order.Front() {
		s.remove(el)
	}
}

// evict drops the expired entries at the front of the write order, or else
// the least recently written one. Entries share a TTL per kind, so the write
// order is close to the expiry order.
func (s *Store) evict(now time.Time) {
	front := s.order.Front()
	s.remove(front)
	for el := s.order.Front(); el != nil && !now.Before(el.Value.(*entry).expires); el = s.order.Front() {
		s.remove(el)
	}
}

func (s *Store) remove(el *list.Element) {
	e := el.Value.(*entry)
	s.order.Remove(el)
	delete(s.entries, e.key)
	s.bytes -= e.size()
}

func (s *Store) lock() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	return nil
}

// record returns the live record at key. s.mu is held.
func (s *Store) record(key string, now time.Time) *record.Record {
	if e := s.get(idemKey(key), now); e != nil {
		return e.rec
	}
	return nil
}

// Claim implements store.Idempotency.
func (s *Store) Claim(_ context.Context, key, fp, owner string, lease, ttl time.Duration) (store.Claim, error) {
	if err := s.lock(); err != nil {
		return store.Claim{}, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	c, rec := record.Claim(s.record(key, now), now, fp, owner, lease, ttl)
	if rec != nil {
		s.put(&entry{key: idemKey(key), rec: rec, expires: time.Unix(0, rec.Expires)}, now)
		s.waiters.Wake(key) // a takeover: waiters wait on the new lease
	}
	return c, nil
}

// Renew implements store.Idempotency.
func (s *Store) Renew(_ context.Context, key, owner string, lease time.Duration) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.record(key, now)
	if !record.Owned(r, owner) {
		return store.ErrLeaseLost
	}
	r.LeaseUntil = now.Add(lease).UnixNano()
	return nil
}

// Complete implements store.Idempotency.
func (s *Store) Complete(_ context.Context, key, owner string, result []byte, ttl time.Duration) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.record(key, now)
	if !record.Owned(r, owner) {
		return store.ErrLeaseLost
	}
	done := *r
	done.Done, done.Result, done.Expires = true, append([]byte(nil), result...), now.Add(ttl).UnixNano()
	s.put(&entry{key: idemKey(key), rec: &done, expires: time.Unix(0, done.Expires)}, now)
	s.waiters.Wake(key)
	return nil
}

// Release implements store.Idempotency.
func (s *Store) Release(_ context.Context, key, owner string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if !record.Owned(s.record(key, s.clock.Now()), owner) {
		return store.ErrLeaseLost
	}
	s.remove(s.entries[idemKey(key)])
	s.waiters.Wake(key)
	return nil
}

// Wait implements store.Idempotency.
func (s *Store) Wait(ctx context.Context, key string) error {
	woken, done := s.waiters.Chan(key)
	defer done()
	if err := s.lock(); err != nil {
		return err
	}
	now := s.clock.Now()
	r := s.record(key, now)
	if r == nil || !r.InFlight(now) {
		s.mu.Unlock()
		return nil
	}
	until := time.Unix(0, r.LeaseUntil)
	s.mu.Unlock()
	return record.Wait(ctx, woken, until.Sub(now))
}

// GetVar implements store.Vars.
func (s *Store) GetVar(_ context.Context, scope, name string) ([]byte, bool, error) {
	if err := s.lock(); err != nil {
		return nil, false, err
	}
	defer s.mu.Unlock()
	e := s.get(varKey(scope, name), s.clock.Now())
	if e == nil {
		return nil, false, nil
	}
	return e.value, true, nil
}

// SetVar implements store.Vars.
func (s *Store) SetVar(_ context.Context, scope, name string, value []byte, ttl time.Duration) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.put(&entry{key: varKey(scope, name), value: append([]byte(nil), value...), expires: now.Add(ttl)}, now)
	return nil
}

// AddVar implements store.Vars.
func (s *Store) AddVar(_ context.Context, scope, name string, value []byte, ttl time.Duration) (bool, error) {
	if err := s.lock(); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	k := varKey(scope, name)
	if s.get(k, now) != nil {
		return false, nil
	}
	s.put(&entry{key: k, value: append([]byte(nil), value...), expires: now.Add(ttl)}, now)
	return true, nil
}

// DeleteVar implements store.Vars.
func (s *Store) DeleteVar(_ context.Context, scope, name string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if el, ok := s.entries[varKey(scope, name)]; ok {
		s.remove(el)
	}
	return nil
}

// Len returns how many entries the store holds, expired ones included until
// they are evicted or read.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Bytes returns what the records and variables hold, and what the event
// logs hold, as MaxBytes and MaxLogBytes count them.
func (s *Store) Bytes() (entries, logs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes, s.logBytes
}

// Close implements io.Closer.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.entries = nil
	s.logs = nil
	s.order.Init()
	s.finished.Init()
	s.bytes, s.logBytes = 0, 0
	s.signals.Close()
	return nil
}
