// Package fanout hands a store's notices (store.Signals) to the watchers of
// their topics in this process: one map from topic to the watchers' wake
// functions, bounded, which every backend shares. The memory and bolt
// stores wake it when a topic is signalled; the Redis store when its one
// subscription delivers a notice, and wakes everyone when that
// subscription is established again, since notices may have been missed
// while it was down.
package fanout

import (
	"sync"
	"sync/atomic"
)

// DefaultMax bounds the watchers of a Hub whose Max is unset. A replica
// watches one topic per detached batch it runs and per call it holds for
// approval, so this is far above what one serves; past it a watcher is
// refused and looks at its mailbox as it would without notices.
const DefaultMax = 1 << 16

// Hub is the watchers of topics. The zero value is ready to use.
type Hub struct {
	// Max bounds the watchers, all topics together; DefaultMax when 0.
	Max int

	mu     sync.Mutex
	n      int
	topics map[string][]*watcher
	closed bool
}

type watcher struct {
	wake    func()
	stopped atomic.Bool
}

// Watch adds wake as a watcher of topic, and returns the function that
// removes it; false (and a no-op stop) when the hub holds Max watchers
// already or is closed.
func (h *Hub) Watch(topic string, wake func()) (stop func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	limit := h.Max
	if limit <= 0 {
		limit = DefaultMax
	}
	if h.closed || h.n >= limit {
		return func() {}, false
	}
	if h.topics == nil {
		h.topics = make(map[string][]*watcher)
	}
	w := &watcher{wake: wake}
	h.topics[topic] = append(h.topics[topic], w)
	h.n++
	var once sync.Once
	return func() { once.Do(func() { h.remove(topic, w) }) }, true
}

func (h *Hub) remove(topic string, w *watcher) {
	w.stopped.Store(true)
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.topics[topic]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			h.n--
			break
		}
	}
	if len(ws) == 0 {
		delete(h.topics, topic)
	} else {
		h.topics[topic] = ws
	}
}

// Wake calls the wake functions of topic's watchers, outside the hub's
// lock, so that they may watch or stop. A watcher stopped while a wake is
// handed out is skipped unless its turn had already come.
func (h *Hub) Wake(topic string) {
	h.mu.Lock()
	ws := h.topics[topic]
	var wake []*watcher
	if len(ws) > 0 {
		wake = append(wake, ws...)
	}
	h.mu.Unlock()
	call(wake)
}

// WakeAll calls every watcher's wake function: notices may have been
// missed.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	wake := make([]*watcher, 0, h.n)
	for _, ws := range h.topics {
		wake = append(wake, ws...)
	}
	h.mu.Unlock()
	call(wake)
}

func call(ws []*watcher) {
	for _, w := range ws {
		if !w.stopped.Load() {
			w.wake()
		}
	}
}

// Len is the number of watchers.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Close drops every watcher and refuses new ones.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.topics = nil
	h.n = 0
}
