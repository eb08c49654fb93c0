package engine

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/engine/internal/coalesce"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/proto"
)

// A detached batch's events live in the store (Deps.EventLog), one log
// per batch, written by the batch's one writer before any reader sees them:
// every attachment, the batch's own first stream included, reads the log.
// So any replica sharing the store replays a batch's events and follows
// its live ones, and a batch whose replica died is found unfinished, with
// no owner, once its lease has run out: the first reader to notice takes
// the log over and ends it, its open calls CANCELLED (owner lost).
//
// The log is bounded: progress is coalesced before it is written
// (engine/internal/coalesce), so a batch of n calls writes at most
// 2 + 4n + coalesce.MaxStored events (BatchAccepted and BatchFinished, per
// call CallStarted, CallAwaitingApproval, the merged progress before its
// result, and CallResult), each within MaxMessageBytes.

// logName is the name of a batch's log in the store: scoped by its caller,
// so that another caller's request names a log that does not exist.
func logName(caller, batchID string) string { return strconv.Quote(caller) + "/" + batchID }

// batchLog is a detached batch's log as its writer keeps it.
type batchLog struct {
	e      *Engine
	b      *batch
	name   string
	failed atomic.Bool // a write failed or the lease was lost: nothing more is written

	coal coalesce.Coalescer

	mu      sync.Mutex
	ticker  *time.Timer // renews the lease and reads the control requests
	stopped bool
}

// openLog creates the batch's log, owned by this engine under a lease that
// a timer renews, and returns it.
func (e *Engine) openLog(b *batch) (*batchLog, error) {
	l := &batchLog{e: e, b: b, name: logName(CallerFrom(b.callerCtx), b.id)}
	ctx, cancel := context.WithTimeout(b.callerCtx, storeTimeout)
	defer cancel()
	if err := e.deps.EventLog.Open(ctx, l.name, e.deps.Replica, e.cfg.BatchLease, e.cfg.BatchTTL); err != nil {
		return nil, err
	}
	l.coal.Init(len(b.req.GetCalls()), e.cfg.MaxResultBytes)
	l.ticker = time.AfterFunc(l.tick(), l.renew)
	return l, nil
}

// tick is how often the owner renews its lease and looks for requests.
func (l *batchLog) tick() time.Duration { return min(l.e.cfg.BatchLease/3, 500*time.Millisecond) }

// renew renews the lease and carries out a cancellation requested on
// another replica; then it runs again, until stop.
func (l *batchLog) renew() {
	e := l.e
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if !l.failed.Load() {
		if err := e.deps.EventLog.RenewLog(ctx, l.name, e.deps.Replica, e.cfg.BatchLease); err != nil {
			l.lost(err)
		}
	}
	if reason, ok := (cancelMail{e.deps.Vars}).requested(ctx, l.name); ok {
		l.b.cancel(&errCancelRequested{reason: reason})
	}
	l.mu.Lock()
	if !l.stopped {
		l.ticker.Reset(l.tick())
	}
	l.mu.Unlock()
}

// errLogLost is the cause of a detached batch's cancellation when its log
// could not be written: its readers could not learn what it does.
var errLogLost = errors.New("the batch's event log could not be written")

// lost stops writing the log after err: the batch is cancelled (its results
// still recorded under their keys), and its lease left to run out, so that
// its readers report its open calls as CANCELLED, owner lost.
func (l *batchLog) lost(err error) {
	if l.failed.CompareAndSwap(false, true) {
		l.e.deps.Logger.Error("detached batch's event log lost; cancelling the batch", "batch_id", l.b.id, "error", err)
		l.b.cancel(errLogLost)
	}
}

// stop ends the renewals.
func (l *batchLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.ticker.Stop()
	l.mu.Unlock()
}

// write is the writer's: it numbers ev and appends it, after coalescing
// progress (see coalesce).
func (l *batchLog) write(ev *toolwirev1.ExecuteBatchResponse) {
	if ev.GetProgress() != nil {
		if ev = l.coal.Progress(ev, time.Now()); ev == nil {
			return
		}
	} else if r := ev.GetResult(); r != nil {
		if p := l.coal.Flush(int(r.GetIndex())); p != nil {
			l.append(p)
		}
	}
	l.append(ev)
}

// append numbers ev and appends it to the log.
func (l *batchLog) append(ev *toolwirev1.ExecuteBatchResponse) {
	b := l.b
	b.seq++
	ev.Seq = b.seq
	if l.failed.Load() {
		return
	}
	data, err := proto.Marshal(ev)
	if err != nil {
		l.lost(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	i, err := l.e.deps.EventLog.Append(ctx, l.name, l.e.deps.Replica, data)
	switch {
	case err != nil:
		l.lost(err)
	case i != b.seq:
		l.lost(errors.New("the log's numbering differs from the batch's: entry " + strconv.FormatUint(i, 10) + " for event " + strconv.FormatUint(b.seq, 10)))
	}
}

// finish ends the log after BatchFinished: it lives BatchTTL more.
func (l *batchLog) finish() {
	l.stop()
	if l.failed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := l.e.deps.EventLog.Finish(ctx, l.name, l.e.deps.Replica, l.e.cfg.BatchTTL); err != nil {
		l.e.deps.Logger.Error("could not finish a detached batch's event log", "batch_id", l.b.id, "error", err)
	}
}
