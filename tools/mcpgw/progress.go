package mcpgw

import (
	"context"
	"sync"

	"github.com/toolwire/toolwire/tools"
)

// forwarder hands one call's MCP progress to it from a goroutine of its own,
// keeping only the latest report while the client reads slowly. The SDK
// handles a session's notifications one at a time, so reporting directly
// would make every other call's progress (and tools/list_changed) wait for
// the slowest reader. MCP progress carries no output chunks: a newer report
// supersedes an older one, so keeping the latest loses nothing that matters.
type forwarder struct {
	call *tools.Call

	mu      sync.Mutex
	latest  *tools.Progress
	running chan struct{} // non-nil while a goroutine delivers; closed when it exits
	done    bool          // the call has returned: later reports are dropped
}

// add queues p, replacing a report not yet delivered.
func (f *forwarder) add(p tools.Progress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	f.latest = &p
	if f.running == nil {
		f.running = make(chan struct{})
		go f.deliver(f.running)
	}
}

func (f *forwarder) deliver(exit chan struct{}) {
	defer close(exit)
	for {
		f.mu.Lock()
		p := f.latest
		f.latest = nil
		if p == nil {
			f.running = nil
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		f.call.Report(*p) // blocks while the client reads slowly
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
