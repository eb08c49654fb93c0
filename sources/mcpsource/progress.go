package mcpsource

import (
	"context"
	"sync"

	"github.com/toolwire/toolwire/tools"
)

// maxQueued bounds the reports a call keeps for a slow reader; past it the
// newest report replaces the last queued one.
const maxQueued = 256

// forwarder hands one call's MCP progress to it, in the order the server
// sent it, from a goroutine of its own. Reports are queued as they are read
// off the wire (see wire.go), so reporting directly would make the server's
// every other message wait for the slowest reader. A fast reader gets every
// report; a reader more than maxQueued reports behind loses intermediate
// ones, never the latest: MCP progress carries no output chunks, so a newer
// report supersedes an older one.
type forwarder struct {
	call *tools.Call

	mu      sync.Mutex
	queue   []tools.Progress
	running chan struct{} // non-nil while a goroutine delivers; closed when it exits
	done    bool          // the call has returned: later reports are dropped
}

// add queues p.
func (f *forwarder) add(p tools.Progress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if len(f.queue) < maxQueued {
		f.queue = append(f.queue, p)
	} else {
		f.queue[len(f.queue)-1] = p
	}
	if f.running == nil {
		f.running = make(chan struct{})
		go f.deliver(f.running)
	}
}

func (f *forwarder) deliver(exit chan struct{}) {
	defer close(exit)
	for {
		f.mu.Lock()
		if len(f.queue) == 0 {
			f.running = nil
			f.mu.Unlock()
			return
		}
		p := f.queue[0]
		f.queue = f.queue[1:]
		f.mu.Unlock()
		f.call.Report(p) // blocks while the client reads slowly
	}
}

// finish delivers what is queued, unless ctx ends first, and drops reports
// that arrive later. After it returns no goroutine outlives the call: one
// still blocked in Report returns once the server closes the call.
func (f *forwarder) finish(ctx context.Context) {
	f.mu.Lock()
	f.done = true
	exit := f.running
	f.mu.Unlock()
	if exit != nil {
		select {
		case <-exit:
		case <-ctx.Done():
		}
	}
}
