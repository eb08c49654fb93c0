package memory

import (
	"context"
	"iter"
	"time"

	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/internal/record"
)

// memLog is an event log: its state and the entries it keeps, entries[i]
// with index First+i.
type memLog struct {
	meta    record.Log
	entries [][]byte
}

// DefaultMaxLogEntries bounds each event log of a store whose Options leave
// MaxLogEntries unset.
const DefaultMaxLogEntries = 100_000

// liveLog returns the live log name, dropping it if expired; s.mu is held.
// It also sweeps every expired log, at most once a second, so that logs
// nobody reads again still go.
func (s *Store) liveLog(name string, now time.Time) *memLog {
	if now.Sub(s.swept) >= time.Second {
		s.swept = now
		for n, l := range s.logs {
			if l.meta.Expired(now) {
				delete(s.logs, n)
			}
		}
	}
	l := s.logs[name]
	if l != nil && l.meta.Expired(now) {
		delete(s.logs, name)
		return nil
	}
	return l
}

// Open implements store.EventLog.
func (s *Store) Open(_ context.Context, name, owner string, lease, ttl time.Duration, data ...[]byte) error {
	if err := s.lock(); err != nil {
		return err
	}
	now := time.Now()
	if s.liveLog(name, now) != nil {
		s.mu.Unlock()
		return store.ErrLogExists
	}
	l := &memLog{meta: *record.NewLog(owner, now, lease, ttl)}
	s.logs[name] = l
	s.appendLocked(l, data)
	s.mu.Unlock()
	if len(data) > 0 {
		s.logWaiters.Wake(name)
	}
	return nil
}

// owned returns owner's writable log name; s.mu is held.
func (s *Store) owned(name, owner string) (*memLog, error) {
	l := s.liveLog(name, time.Now())
	switch {
	case l == nil:
		return nil, store.ErrLogNotFound
	case !l.meta.Writable(owner):
		return nil, store.ErrLeaseLost
	}
	return l, nil
}

// appendLocked appends data to l, dropping the oldest entries past the
// bound; s.mu is held.
func (s *Store) appendLocked(l *memLog, data [][]byte) {
	for _, d := range data {
		_, drop := l.meta.Append(s.maxLog)
		l.entries = append(l.entries, append([]byte(nil), d...))
		if drop > 0 {
			clear(l.entries[:drop])
			l.entries = l.entries[drop:]
		}
	}
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
		l := s.liveLog(name, time.Now())
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
	woken := s.logWaiters.Chan(name)
	if err := s.lock(); err != nil {
		return err
	}
	l := s.liveLog(name, time.Now())
	if l == nil || l.meta.Last > index || l.meta.Finished {
		s.mu.Unlock()
		return nil
	}
	next := l.meta.Next()
	if !l.meta.Owned(time.Now()) {
		next = time.Unix(0, l.meta.Expires) // lost: look again when it expires
	}
	s.mu.Unlock()
	return record.Wait(ctx, woken, next)
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
	l.meta.Lease(time.Now(), lease)
	return nil
}

// TakeOver implements store.EventLog.
func (s *Store) TakeOver(_ context.Context, name, owner string, lease time.Duration) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := time.Now()
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
	s.appendLocked(l, data)
	l.meta.Finish(time.Now(), ttl)
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
	now := time.Now()
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
