package engine

import (
	"context"
	"fmt"
	"sync"
)

// A WatchTools stream lives for as long as its client keeps it, holding a
// goroutine and its stream (about 10 KB) on the server, and it is not a
// batch, so max_concurrent_batches does not count it: only the
// connection and stream limits of each port bounded how many one caller
// held. They are bounded here, once for every surface, per caller and in
// all, as /mcp bounds its sessions and subscriptions/listen streams.

// Defaults of Config.MaxWatches and Config.MaxWatchesPerCaller, those of
// /mcp's mcp_max_sessions and mcp_max_sessions_per_caller.
const (
	DefaultMaxWatches          = 1000
	DefaultMaxWatchesPerCaller = 100
)

// watches counts the watch streams open, by caller.
type watches struct {
	mu      sync.Mutex
	callers map[string]int
	total   int
}

// Watch takes a place for a long-lived watch stream (WatchTools) of ctx's
// caller, and returns the function that gives it back (call it when the
// stream ends; more calls do nothing), or ResourceExhausted naming the
// bound when the caller (Config.MaxWatchesPerCaller) or the engine
// (Config.MaxWatches) already holds as many as it may. A stream open is
// never ended for another.
func (e *Engine) Watch(ctx context.Context) (release func(), err error) {
	caller := CallerFrom(ctx)
	w := &e.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.callers[caller]; n >= e.cfg.MaxWatchesPerCaller {
		return nil, &Error{Code: ResourceExhausted, Message: fmt.Sprintf("this caller has %d WatchTools streams open (max_watches_per_caller); end one before opening another", n)}
	}
	if w.total >= e.cfg.MaxWatches {
		return nil, &Error{Code: ResourceExhausted, Message: fmt.Sprintf("the server has %d WatchTools streams open (max_watches); retry later", w.total)}
	}
	if w.callers == nil {
		w.callers = map[string]int{}
	}
	w.callers[caller]++
	w.total++
	return sync.OnceFunc(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.callers[caller]--; w.callers[caller] == 0 {
			delete(w.callers, caller)
		}
		w.total--
	}), nil
}
