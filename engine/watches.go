package engine

import (
	"context"
	"fmt"
)

// A WatchTools stream lives for as long as its client keeps it, holding a
// goroutine and its stream (12.7 KiB of RSS, measured on serve) on the server, and it is not a
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

// Watch takes a place for a long-lived watch stream (WatchTools) of ctx's
// caller, and returns the function that gives it back (call it when the
// stream ends; more calls do nothing), or ResourceExhausted naming the
// bound when the caller (Config.MaxWatchesPerCaller) or the engine
// (Config.MaxWatches) already holds as many as it may. A stream open is
// never ended for another.
func (e *Engine) Watch(ctx context.Context) (release func(), err error) {
	release, full := e.watches.Take(CallerFrom(ctx))
	switch {
	case full == nil:
		return release, nil
	case full.Total:
		return nil, &Error{Code: ResourceExhausted, Message: fmt.Sprintf("the server has %d WatchTools streams open (max_watches); retry later", full.Held)}
	}
	return nil, &Error{Code: ResourceExhausted, Message: fmt.Sprintf("this caller has %d WatchTools streams open (max_watches_per_caller); end one before opening another", full.Held)}
}
