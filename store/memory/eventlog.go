package memory

import (
	"container/list"
	"context"
	"iter"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/internal/record"
)

// memLog is an event log: its state and the entries it keeps, entries[i]
// with index First+i.
type memLog struct {
	name     string
	meta     record.Log
	entries  [][]byte
	bytes    int           // what it holds, for MaxLogBytes
	finished *list.Element // in Store.finished, once finished
}

// logOverhead and logEntryOverhead are what a log and each of its entries
// cost beside their bytes, for MaxLogBytes.
const (
	logOverhead      = 256
	logEntryOverhead = 96
)

// DefaultMaxLogEntries bounds each event log of a store whose Options leave
// MaxLogEntries unset.
const DefaultMaxLogEntries = 100_000

// liveLog returns the live log name, dropping it if expired; s.mu is held.
// It also sweeps every expired log, at most once a second, so that logs
// nobody reads again still go.
func (s *Store) liveLog(name string, now time.Time) *memLog {
	if now.Sub(s.swept) >= time.Second {
		s.swept = now
		for _, l := range s.logs {
			if l.meta.Expired(now) {
				s.dropLog(l)
			}
		}
	}
	l := s.logs[name]
	if l != nil && l.meta.Expired(now) {
		s.dropLog(l)
		return nil
	}
	return l
}

// dropLog forgets l; s.mu is held.
func (s *Store) dropLog(l *memLog) {
	delete(s.logs, l.name)
	s.logBytes -= l.bytes
	if l.finished != nil {
		s.finished.Remove(l.finished)
		l.finished = nil
	}
}

// trimLogs drops the logs finished longest ago while the logs hold more
// than MaxLogBytes; s.mu is held. A log being written is never dropped
// (its reader would lose a running batch), nor the one finished last
// (its reader is likely reading it now).
func (s *Store) trimLogs() {
	for s.logBytes > s.maxLogBytes {
		front := s.finished.Front()
		if front == nil || front == s.finished.Back() {
			return
		}
		s.dropLog(front.Value.(*memLog))
	}
}

// Open implements store.EventLog.
func (s *Store) Open(_ context.Context, name, owner string, lease, ttl time.Duration, data ...[]byte) error {
	return s.open(name, owner, lease, ttl, false, data)
}

// OpenFinished implements store.LogOpenFinisher.
func (s *Store) OpenFinished(_ context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	return s.open(name, owner, 0, ttl, true, data)
}

// open creates the log name with data as its entries, under a lease or,
// finished, with none.
func (s *Store) open(name, owner string, lease, ttl time.Duration, finished bool, data [][]byte) error {
	if err := s.lock(); err != nil {
		return err
	}
	now := s.clock.Now()
	if s.liveLog(name, now) != nil {
		s.mu.Unlock()
		return store.ErrLogExists
	}
	l := &memLog{name: name, meta: *record.NewLog(owner, now, lease, ttl), bytes: logOverhead + len(name)}
	s.logs[name] = l
	s.logBytes += l.bytes
	if finished {
		// Finished before its entries may push others out, as Finish does.
		l.meta.Finish(now, ttl)
		l.finished = s.finished.PushBack(l)
	}
	s.appendLocked(l, data)
	s.mu.Unlock()
	if len(data) > 0 {
		s.logWaiters.Wake(name)
	}
	return nil
}

// owned returns owner's writable log name; s.mu is held.
func (s *Store) owned(name, owner string) (*memLog, error) {
	l := s.liveLog(name, s.clock.Now())
	switch {
	case l == nil:
		return nil, store.ErrLogNotFound
	case !l.meta.Writable(owner):
		return nil, store.ErrLeaseLost
	}
	return l, nil
}

// appendLocked appends data to l, dropping the oldest entries past the
// bound, then the logs finished longest ago past MaxLogBytes; s.mu is held.
func (s *Store) appendLocked(l *memLog, data [][]byte) {
	n := l.bytes
	for _, d := range data {
		_, drop := l.meta.Append(s.maxLog)
		l.entries = append(l.entries, append([]byte(nil), d...))
		l.bytes += logEntryOverhead + len(d)
		if drop > 0 {
			for _, e := range l.entries[:drop] {
				l.bytes -= logEntryOverhead + len(e)
			}
			clear(l.entries[:drop])
			l.entries = l.entries[drop:]
		}
	}
	s.logBytes += l.bytes - n
	s.trimLogs()
}

// Append implements store.EventLog.
func (s *Store) Append(_ context.Context, name, owner string, data ...[]byte) (uint64, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	l, err := s.owned(name, owner)
	if err != nil {
		s.mu.Unlock()
		return 0, err
	}
	s.appendLocked(l, data)
	i := l.meta.Last
	s.mu.Unlock()
	if len(data) > 0 {
		s.logWaiters.Wake(name)
	}
	return i, nil
}

// After implements store.EventLog.
func (s *Store) After(_ context.Context, name string, index uint64) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		if err := s.lock(); err != nil {
			yield(store.Entry{}, err)
			return
		}
		l := s.liveLog(name, s.clock.Now())
		if l == nil {
			s.mu.Unlock()
			yield(store.Entry{}, store.ErrLogNotFound)
			return
		}
		first, last := l.meta.First, l.meta.Last
		if index >= last {
			s.mu.Unlock()
			return
		}
		if index+1 < first {
			s.mu.Unlock()
			yield(store.Entry{}, store.ErrDropped)
			return
		}
		// The entries are never written once appended: yield them unlocked.
		entries := l.entries[index+1-first : last-first+1]
		s.mu.Unlock()
		for k, d := range entries {
			if !yield(store.Entry{Index: index + 1 + uint64(k), Data: d}, nil) {
				return
			}
		}
	}
}

// WaitLog implements store.EventLog.
func (s *Store) WaitLog(ctx context.Context, name string, index uint64) error {
	woken, done := s.logWaiters.Chan(name)
	defer done()
	if err := s.lock(); err != nil {
		return err
	}
	now := s.clock.Now()
	l := s.liveLog(name, now)
	if l == nil || l.meta.Last > index || l.meta.Finished {
		s.mu.Unlock()
		return nil
	}
	next := l.meta.Next(now)
	if !l.meta.Owned(now) {
		next = time.Unix(0, l.meta.Expires) // lost: look again when it expires
	}
	s.mu.Unlock()
	return record.Wait(ctx, woken, next.Sub(now))
}

// RenewLog implements store.EventLog.
func (s *Store) RenewLog(_ context.Context, name, owner string, lease time.Duration) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	l, err := s.owned(name, owner)
	if err != nil {
		return err
	}
	l.meta.Lease(s.clock.Now(), lease)
	return nil
}

// RenewLogs implements store.LogRenewer, under one lock.
func (s *Store) RenewLogs(_ context.Context, owner string, lease time.Duration, names ...string) ([]error, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	errs := make([]error, len(names))
	for i, name := range names {
		l, err := s.owned(name, owner)
		if err != nil {
			errs[i] = err
			continue
		}
		l.meta.Lease(now, lease)
	}
	return errs, nil
}

// TakeOver implements store.EventLog.
func (s *Store) TakeOver(_ context.Context, name, owner string, lease time.Duration) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	l := s.liveLog(name, now)
	switch {
	case l == nil:
		return store.ErrLogNotFound
	case l.meta.Finished || l.meta.Owned(now):
		return store.ErrLeaseLost
	}
	l.meta.Owner = owner
	l.meta.Lease(now, lease)
	return nil
}

// Finish implements store.EventLog.
func (s *Store) Finish(_ context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	if err := s.lock(); err != nil {
		return err
	}
	l, err := s.owned(name, owner)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	l.meta.Finish(s.clock.Now(), ttl)
	l.finished = s.finished.PushBack(l)
	s.appendLocked(l, data)
	s.mu.Unlock()
	s.logWaiters.Wake(name)
	return nil
}

// Stat implements store.EventLog.
func (s *Store) Stat(_ context.Context, name string) (store.LogInfo, error) {
	if err := s.lock(); err != nil {
		return store.LogInfo{}, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	l := s.liveLog(name, now)
	if l == nil {
		return store.LogInfo{}, store.ErrLogNotFound
	}
	return l.meta.Info(now), nil
}

// Logs returns how many event logs the store holds, expired ones included
// until they are swept or read.
func (s *Store) Logs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.logs)
}
