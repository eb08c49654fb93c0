package bolt

import bbolt "go.etcd.io/bbolt"

// SetBeforeCommit makes f run each time a group's commit starts, once the
// group is taken from the queue: what queues meanwhile is the next group.
func SetBeforeCommit(s *Store, f func()) { s.gc.beforeCommit = f }

// Queued is how many writes wait for the next commit.
func Queued(s *Store) int {
	s.gc.mu.Lock()
	defer s.gc.mu.Unlock()
	return len(s.gc.queue)
}

// Grouped runs fn as the event logs' writes run: in a transaction shared
// with the writes queued beside it.
func Grouped(s *Store, fn func(tx *bbolt.Tx) error) error { return s.grouped(fn) }
