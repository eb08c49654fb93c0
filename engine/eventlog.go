package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/engine/internal/coalesce"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
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
//
// A store that stalls does not end the batch: an event it does not take
// is buffered (bounded: maxPendingEvents, maxPendingBytes) and appended,
// in order, as soon as it answers, by the next append or lease renewal;
// the lease goes on being renewed. Only a lost lease (another replica
// took the log over after it had really run out), a vanished log, or a
// buffer past its bounds ends the batch (lost).
type batchLog struct {
	e      *Engine
	b      *batch
	name   string
	failed atomic.Bool // a write failed for good or the lease was lost: nothing more is written

	coal coalesce.Coalescer

	mu      sync.Mutex
	ticker  *time.Timer // renews the lease and reads the control requests
	stopped bool

	// The cancel mailbox is watched (signals.go): woken, the batch looks
	// at once; renew looks only every fallbackPoll then.
	unwatch   func()
	watched   bool
	wakes     atomic.Int32 // wakes not yet looked after; see woken
	lookAgain atomic.Bool  // a look failed: renew looks at its next tick
	looked    time.Time    // renew's last look at the mailbox

	wmu          sync.Mutex     // the appends: the writer's and the renewals' flushes
	pending      []pendingEntry // numbered events the store has not taken yet, in order
	pendingBytes int
	unsure       bool // the last failed append may have landed: Stat before the next
}

type pendingEntry struct {
	seq  uint64
	data []byte
}

// Bounds of the events a detached batch buffers while the store does not
// take them; past them the batch is lost.
const (
	maxPendingEvents = 4096
	maxPendingBytes  = 16 << 20
)

// startedVar names the variable, in the batch's log scope of Vars, that
// holds when the batch started (RFC 3339, ns), so that a reader that ends
// it after its replica was lost reports its real duration.
const startedVar = "started"

// openLog creates the batch's log, owned by this engine under a lease that
// a timer renews, and returns it.
func (e *Engine) openLog(b *batch) (*batchLog, error) {
	l := &batchLog{e: e, b: b, name: logName(CallerFrom(b.callerCtx), b.id)}
	// Watched before the log exists, so that no cancel asked once another
	// replica can see it comes unnoticed.
	l.unwatch, l.watched = e.watch(cancelTopic(l.name), l.woken)
	l.looked = time.Now() // nothing can be asked of a log not yet open
	ctx, cancel := context.WithTimeout(b.callerCtx, appendTimeout)
	defer cancel()
	if err := e.deps.EventLog.Open(ctx, l.name, e.deps.Replica, e.cfg.BatchLease, e.cfg.BatchTTL); err != nil {
		l.unwatch()
		return nil, err
	}
	// Best effort: without it, a takeover reports a duration of 0.
	started, _ := json.Marshal(b.start.Format(time.RFC3339Nano))
	_ = e.deps.Vars.SetVar(ctx, cancelScope(l.name), startedVar, started, e.cfg.BatchTTL+24*time.Hour)
	l.coal.Init(len(b.req.GetCalls()), e.cfg.MaxResultBytes)
	l.ticker = time.AfterFunc(l.tick(), l.renew)
	return l, nil
}

// startedAt is when the batch of log name started, as openLog noted it;
// false when it is not known.
func (e *Engine) startedAt(ctx context.Context, name string) (time.Time, bool) {
	v, ok, err := e.deps.Vars.GetVar(ctx, cancelScope(name), startedVar)
	if err != nil || !ok {
		return time.Time{}, false
	}
	var text string
	if json.Unmarshal(v, &text) != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, text)
	return t, err == nil
}

// tick is how often the owner renews its lease (and looks for requests
// when nothing notifies it of them: see renew).
func (l *batchLog) tick() time.Duration { return min(l.e.cfg.BatchLease/3, 500*time.Millisecond) }

// renew renews the lease, appends what the store did not take before, and
// carries out a cancellation requested on another replica (each time when
// nothing notifies the batch of one, else every fallbackPoll, or after a
// look that failed: see signals.go); then it runs again, until stop. A
// store that does not answer is asked again next tick: the lease it holds
// outlasts a stall shorter than it.
func (l *batchLog) renew() {
	e := l.e
	if !l.failed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
		err := e.deps.EventLog.RenewLog(ctx, l.name, e.deps.Replica, e.cfg.BatchLease)
		cancel()
		if lostFor(err) {
			l.lost(err)
		} else if err != nil {
			e.deps.Logger.Warn("could not renew a detached batch's lease; trying again", "batch_id", l.b.id, "error", err)
		} else {
			l.wmu.Lock()
			l.flush()
			l.wmu.Unlock()
		}
	}
	if now := time.Now(); l.lookAgain.Swap(false) || now.Sub(l.looked) >= e.poll(l.watched, 0) {
		l.looked = now
		l.checkCancel()
	}
	l.mu.Lock()
	if !l.stopped {
		l.ticker.Reset(l.tick())
	}
	l.mu.Unlock()
}

// lostFor tells whether err from an owner's write means the log is no
// longer this owner's to write.
func lostFor(err error) bool {
	return errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrLogNotFound)
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
	l.unwatch()
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

// append numbers ev and appends it to the log, after what the store has
// not taken yet.
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
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if len(l.pending) >= maxPendingEvents || l.pendingBytes+len(data) > maxPendingBytes {
		l.lost(errors.New("the store took no event for longer than the batch can buffer (" +
			strconv.Itoa(len(l.pending)) + " events, " + strconv.Itoa(l.pendingBytes) + " bytes)"))
		return
	}
	l.pending = append(l.pending, pendingEntry{seq: b.seq, data: data})
	l.pendingBytes += len(data)
	l.flush()
}

// flush appends the pending events in order; it stops at the first the
// store does not take, and returns that error. Its caller holds wmu.
func (l *batchLog) flush() error {
	e := l.e
	if l.failed.Load() {
		return errLogLost
	}
	if len(l.pending) > 0 && l.unsure {
		// An append whose answer was lost may have landed: skip what did.
		ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
		info, err := e.deps.EventLog.Stat(ctx, l.name)
		cancel()
		if err != nil {
			if errors.Is(err, store.ErrLogNotFound) {
				l.lost(err)
			}
			return err
		}
		l.unsure = false
		for len(l.pending) > 0 && l.pending[0].seq <= info.Last {
			l.pendingBytes -= len(l.pending[0].data)
			l.pending = l.pending[1:]
		}
	}
	for len(l.pending) > 0 {
		p := l.pending[0]
		ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
		i, err := e.deps.EventLog.Append(ctx, l.name, e.deps.Replica, p.data)
		cancel()
		switch {
		case lostFor(err):
			l.lost(err)
			return err
		case err != nil:
			l.unsure = true
			return err
		case i != p.seq:
			err := errors.New("the log's numbering differs from the batch's: entry " + strconv.FormatUint(i, 10) + " for event " + strconv.FormatUint(p.seq, 10))
			l.lost(err)
			return err
		}
		l.pendingBytes -= len(p.data)
		l.pending[0] = pendingEntry{}
		l.pending = l.pending[1:]
	}
	return nil
}

// finish ends the log after BatchFinished: once the store has taken every
// event, it is finished, to live BatchTTL more. While the store does not
// answer it tries again, renewing the lease, for up to two leases; past
// that the log is left to its readers, who end it as owner lost.
func (l *batchLog) finish() {
	l.stop()
	e := l.e
	giveUp := time.Now().Add(2 * e.cfg.BatchLease)
	backoff := 50 * time.Millisecond
	for {
		if l.failed.Load() {
			return
		}
		l.wmu.Lock()
		err := l.flush()
		l.wmu.Unlock()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
			err = e.deps.EventLog.Finish(ctx, l.name, e.deps.Replica, e.cfg.BatchTTL)
			if lostFor(err) {
				// A Finish whose answer was lost may have landed.
				if info, serr := e.deps.EventLog.Stat(ctx, l.name); serr == nil && info.Finished {
					err = nil
				}
			}
			cancel()
			if err == nil {
				return
			}
			if lostFor(err) {
				e.deps.Logger.Error("could not finish a detached batch's event log", "batch_id", l.b.id, "error", err)
				return
			}
		}
		if time.Now().After(giveUp) {
			e.deps.Logger.Error("the store did not take a detached batch's last events; its readers will end it as owner lost",
				"batch_id", l.b.id, "pending", len(l.pending), "error", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
		if err := e.deps.EventLog.RenewLog(ctx, l.name, e.deps.Replica, e.cfg.BatchLease); lostFor(err) {
			l.lost(err)
		}
		cancel()
		select {
		case <-time.After(backoff):
		case <-e.closed:
			e.deps.Logger.Error("the engine closed before the store took a detached batch's last events; its readers will end it as owner lost",
				"batch_id", l.b.id, "pending", len(l.pending), "error", err)
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}
