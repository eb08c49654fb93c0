package bolt

import (
	"context"

	"github.com/toolwire/toolwire/store"
)

// Signals: one process at a time holds a bolt file (it is locked), so
// whoever writes a mailbox and whoever waits on it share this Store: a
// notice is a call, as in the memory store. Signal wakes the topic's
// watchers on the signaller's goroutine, and none is ever lost.

// Signal implements store.Signals.
func (s *Store) Signal(_ context.Context, topic string) error {
	select {
	case <-s.stop:
		return store.ErrClosed
	default:
	}
	s.signals.Wake(topic)
	return nil
}

// Watch implements store.Signals.
func (s *Store) Watch(topic string, wake func()) (stop func(), ok bool) {
	return s.signals.Watch(topic, wake)
}

// Listening implements store.Signals: no notice is ever lost.
func (s *Store) Listening() bool { return true }
