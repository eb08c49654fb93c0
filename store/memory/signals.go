package memory

import "context"

// Signals: a memory store is shared only by the engines of one process,
// so a notice is a call: Signal wakes the topic's watchers on the
// signaller's goroutine, and none is ever lost.

// Signal implements store.Signals.
func (s *Store) Signal(_ context.Context, topic string) error {
	if err := s.lock(); err != nil {
		return err
	}
	s.mu.Unlock()
	s.signals.Wake(topic)
	return nil
}

// Watch implements store.Signals.
func (s *Store) Watch(topic string, wake func()) (stop func(), ok bool) {
	return s.signals.Watch(topic, wake)
}

// Listening implements store.Signals: no notice is ever lost.
func (s *Store) Listening() bool { return true }
