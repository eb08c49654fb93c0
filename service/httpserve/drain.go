package httpserve

import "sync"

// work counts the requests the port is serving (/healthz and refusals
// aside) and, once draining, refuses new ones and says when the last one
// has ended. The listener stays open meanwhile, so probes and clients get
// an answer (503) rather than a refused connection.
type work struct {
	mu       sync.Mutex
	n        int
	draining bool
	idle     chan struct{} // closed once draining with none running
}

// enter counts a request in, or reports false once draining.
func (w *work) enter() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining {
		return false
	}
	w.n++
	return true
}

// leave counts a request out.
func (w *work) leave() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if w.draining && w.n == 0 {
		w.closeIdle()
	}
}

// drain starts the drain and returns a channel closed when no request
// runs.
func (w *work) drain() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	w.draining = true
	if w.n == 0 {
		w.closeIdle()
	}
	return w.idle
}

func (w *work) closeIdle() {
	select {
	case <-w.idle:
	default:
		close(w.idle)
	}
}

// isDraining reports whether the drain has begun.
func (w *work) isDraining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining
}
