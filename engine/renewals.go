package engine

import (
	"context"
	"sync"
	"time"

	"github.com/toolwire/toolwire/store"
)

// The leases of the detached batches an engine runs are renewed together:
// one goroutine of the engine's, at each tick, renews every live batch's
// log in one store call per renewChunk logs (store.RenewLogs: one Redis
// pipeline, one bolt transaction), then does for each batch what follows
// its renewal (batchLog.renewed). A timer of each batch's own, renewing
// its log alone, made 20,000 store calls a second for 10,000 batches held
// for approval, 4,000–10,000 of them waiting for a pooled Redis connection
// at once, and a bolt store held about 5,100 batches after two minutes,
// each renewal a transaction of its own. The tick is the batches' (tick),
// so a store that stalls for less than a lease still costs a delay, not
// the batch. The goroutine runs while the engine runs detached batches,
// and ends with Close.

// renewChunk bounds the logs one store call renews.
const renewChunk = 1000

// renewals are the detached batches' logs whose leases an engine renews.
type renewals struct {
	mu      sync.Mutex
	logs    map[*batchLog]struct{}
	running bool // renewLogs runs
}

// renewTick is how often the leases are renewed (and the cancel mailboxes
// looked at when nothing notifies the batches of a cancel: see renewed).
func (e *Engine) renewTick() time.Duration { return min(e.cfg.BatchLease/3, 500*time.Millisecond) }

// renewLog has l's lease renewed at each tick from now on, until stop.
func (e *Engine) renewLog(l *batchLog) {
	r := &e.renewals
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs == nil {
		r.logs = make(map[*batchLog]struct{})
	}
	r.logs[l] = struct{}{}
	if !r.running {
		r.running = true
		go e.renewLogs()
	}
}

// dropLog ends the renewals of l's lease.
func (e *Engine) dropLog(l *batchLog) {
	r := &e.renewals
	r.mu.Lock()
	delete(r.logs, l)
	r.mu.Unlock()
}

// renewLogs renews the leases at each tick, until no log is left to renew
// or the engine closes.
func (e *Engine) renewLogs() {
	r := &e.renewals
	t := time.NewTimer(e.renewTick())
	defer t.Stop()
	var logs []*batchLog
	for {
		select {
		case <-t.C:
		case <-e.closed:
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		for l := range r.logs {
			logs = append(logs, l)
		}
		if len(logs) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		start := time.Now()
		e.renewAll(logs)
		clear(logs)
		logs = logs[:0]
		// The next tick a tick after this one began, not after it ended:
		// renewing 10,000 logs takes a while on a busy store.
		t.Reset(max(0, e.renewTick()-time.Since(start)))
	}
}

// renewAll renews the leases of logs, renewChunk at a time, then has each
// batch do what follows its renewal. Once the store has not answered a
// chunk, the rest are not asked this round (each gets that error): a
// store that does not answer costs a round one timeout, not one a chunk,
// which for 10 chunks would outlast a lease. The chunks go one after
// another: at once, 10 pipelines of 1,000 renewals timed out where one at
// a time did not (a busy 2-vCPU VM). A log whose writes failed for good is
// not renewed; its batch still looks at its cancel mailbox.
func (e *Engine) renewAll(logs []*batchLog) {
	asked := make([]bool, len(logs))
	errs := make([]error, len(logs))
	var names []string
	var which []int
	var down error
	for from := 0; from < len(logs); from += renewChunk {
		names, which = names[:0], which[:0]
		for i := from; i < min(from+renewChunk, len(logs)); i++ {
			if !logs[i].failed.Load() {
				names = append(names, logs[i].name)
				which = append(which, i)
				asked[i] = true
			}
		}
		if len(names) == 0 {
			continue
		}
		var answers []error
		err := down
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
			answers, err = store.RenewLogs(ctx, e.deps.EventLog, e.deps.Replica, e.cfg.BatchLease, names...)
			cancel()
			down = err
		}
		for k, i := range which {
			if err != nil {
				errs[i] = err // the store did not answer: for each its stall
			} else {
				errs[i] = answers[k]
			}
		}
	}
	for i, l := range logs {
		l.renewed(asked[i], errs[i])
		if e.afterRenew != nil {
			e.afterRenew()
		}
	}
}
