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
	"github.com/toolwire/toolwire/engine/internal/outbox"
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
// The writer appends in groups (group commit): it takes every event the
// batch's calls have queued meanwhile (Outbox.Take) and appends them in
// one write, one Redis script or one bolt transaction; the events the
// calls emit while that write is under way queue in the outbox and go in
// the next one. Nothing waits for company, so a lone event is written at
// once, and the outbox's bounds still hold the calls back while a slow
// store writes. BatchAccepted goes in the write that opens the log,
// BatchFinished with the last group in the write that finishes it.
//
// What the store has taken is kept a while in memory for this replica's
// readers, the batch's own stream first (read): they read it from there
// rather than back from the store, and only once it is stored. A reader
// that falls behind what is kept, or whose writer stopped without
// finishing the log, reads the store as any attachment does.
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

	// The writer's (run): the group it takes, reused, and what runs it
	// again once it has given up its runner, with nothing to write.
	taking []outbox.Pending
	resume func()

	// A log whose opening waits for the batch's first events (deferred;
	// see deferOpen) is opened by its writer's first write (openFirst),
	// which beginWriting starts once the lanes end or openWindow has
	// passed, whichever comes first.
	deferred  bool
	opened    bool        // the writer's, and under wmu: the store has the log
	writing   atomic.Bool // beginWriting has started the writer
	openTimer *time.Timer // starts the writer after openWindow; under mu
	openErr   error       // why the store did not open it; under kmu

	mu      sync.Mutex
	stopped bool // finish began: the engine's renewals (renewals.go) no longer renew the lease

	flushing atomic.Bool // a renewal's flush is under way; see renewed

	// The cancel mailbox is watched (signals.go): woken, the batch looks
	// at once; renewed looks only every fallbackPoll then.
	unwatch   func()
	watched   bool
	wakes     atomic.Int32 // wakes not yet looked after; see woken
	lookAgain atomic.Bool  // a look failed: renewed looks at its next tick
	looked    time.Time    // renewed's last look at the mailbox

	// Renewals the store has failed in a row, since when: renewed logs
	// the first and the recovery, not every tick between.
	renewFailures int
	renewFailing  time.Time

	wmu          sync.Mutex     // the appends: the writer's and the renewals' flushes
	pending      []pendingEntry // numbered events the store has not taken yet, in order
	pendingBytes int
	unsure       bool     // the last failed write may have landed: Stat before the next
	group        [][]byte // the data of the group being written, reused

	// What the store has taken, for this replica's readers.
	kmu       sync.Mutex
	stored    uint64         // the seq of the last event the store has taken
	kept      []pendingEntry // the last events taken, while a reader may want them
	keptBytes int
	readers   []*keptReader
	wake      chan struct{} // closed, and replaced, when stored grows or the writer stops
	done      bool          // the writer has stopped
	complete  bool          // … having finished the log
	first     *keptReader   // the batch's own stream, joined before anything is stored
}

type pendingEntry struct {
	seq  uint64
	data []byte
}

// keptReader is a reader of the events kept in memory: the seq of the
// last it sent.
type keptReader struct{ seq uint64 }

// Bounds of the events a detached batch buffers while the store does not
// take them, and of those all batches buffer together; past them the batch
// is lost. Without the second, a stall of the store let each running
// detached batch hold 16 MiB (20 batches held 240 MiB within 4 s, and
// max_concurrent_batches of them could hold 64 GiB).
const (
	maxPendingEvents = 4096
	maxPendingBytes  = 16 << 20
	maxUnstoredBytes = 256 << 20
)

// Bounds of one write of a detached batch's events: a longer backlog (the
// store came back after a stall) goes in several.
const (
	maxGroupEvents = 512
	maxGroupBytes  = 4 << 20
)

// Bounds of the events kept for this replica's readers past what the
// slowest has read; a reader further behind reads the store.
const (
	maxKeptEvents = 256
	maxKeptBytes  = 256 << 10
)

// startedVar names the variable, in the batch's log scope of Vars, that
// held when the batch started, for logs opened by replicas before the
// store noted it (LogInfo.Opened); it is read, no longer written.
const startedVar = "started"

// openWindow is how long a detached batch whose log is opened with its
// first events (deferOpen) runs before its log is opened all the same.
const openWindow = 5 * time.Millisecond

// deferOpen reports whether b's log may be opened with its first events,
// while its calls run, rather than before they do: when every call of b
// only reads (or runs nothing: an unknown tool, a call refused), and the
// store can write a whole log at once. A quick batch's log is then one
// write, BatchAccepted to BatchFinished (store.LogOpenFinisher), where it
// was two. Nothing is read before it is stored all the same, and the
// batch's ID is known only from its events, so no one can ask for the
// batch before its log exists. A store that then refuses the log refuses
// the batch (Unavailable), as before, its calls having run; they only
// read, so running them again, as a client then does, is harmless.
func (e *Engine) deferOpen(b *batch) bool {
	if _, ok := e.deps.EventLog.(store.LogOpenFinisher); !ok {
		return false
	}
	for i := range b.calls {
		if t := b.calls[i].tool; t != nil && !t.Annotations.ReadOnly {
			return false
		}
	}
	return true
}

// openLog creates the batch's log, owned by this engine under a lease that
// the engine renews with its other batches' (renewals.go), with
// BatchAccepted as its first event, and returns it; or, when deferOpen
// allows, returns it with BatchAccepted pending, for its writer to open
// with the events that follow (openFirst).
func (e *Engine) openLog(b *batch) (*batchLog, error) {
	l := &batchLog{e: e, b: b, name: logName(CallerFrom(b.callerCtx), b.id), wake: make(chan struct{})}
	l.resume = func() { e.runners.Go(b.writeLog) }
	// Watched before the log exists, so that no cancel asked once another
	// replica can see it comes unnoticed.
	l.unwatch, l.watched = e.watch(cancelTopic(l.name), l.woken)
	l.looked = time.Now() // nothing can be asked of a log not yet open
	l.first = l.join(0)
	acc := b.accepted()
	b.seq++
	acc.Seq = b.seq
	data, err := proto.Marshal(acc)
	if err != nil {
		l.unwatch()
		return nil, err
	}
	if e.deferOpen(b) {
		l.deferred = true
		l.pending = append(l.pending, pendingEntry{seq: acc.Seq, data: data})
		l.pendingBytes = len(data)
		e.unstored.Add(int64(len(data)))
		l.coal.Init(len(b.req.GetCalls()), e.cfg.MaxResultBytes)
		return l, nil
	}
	ctx, cancel := context.WithTimeout(b.callerCtx, appendTimeout)
	defer cancel()
	if err := e.deps.EventLog.Open(ctx, l.name, e.deps.Replica, e.cfg.BatchLease, e.cfg.BatchTTL, data); err != nil {
		l.unwatch()
		return nil, err
	}
	l.took([]pendingEntry{{seq: acc.Seq, data: data}}, false)
	l.opened = true
	l.coal.Init(len(b.req.GetCalls()), e.cfg.MaxResultBytes)
	e.renewLog(l)
	return l, nil
}

// armWindow starts openWindow's timer for a deferred log, once the batch
// has its log (b.log) and before its lanes start.
func (l *batchLog) armWindow() {
	window := openWindow
	if l.e.openWindow > 0 {
		window = l.e.openWindow
	}
	l.mu.Lock()
	l.openTimer = time.AfterFunc(window, l.beginWriting)
	l.mu.Unlock()
}

// beginWriting starts the writer of a log whose opening waits (deferred),
// once: when openWindow has passed with calls still running, on a runner
// of its own.
func (l *batchLog) beginWriting() {
	if l.claimWriter() {
		l.e.runners.Go(l.b.writeLog)
	}
}

// claimWriter reports whether the caller is to run the writer of a
// deferred log: true once, for the first to ask (the window's timer, or
// the lanes' end, which then writes on its own goroutine: the batch's
// events are all queued, for one write).
func (l *batchLog) claimWriter() bool {
	if !l.writing.CompareAndSwap(false, true) {
		return false
	}
	l.mu.Lock()
	t := l.openTimer
	l.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	return true
}

// openFirst opens a deferred log with its first group of events (from
// BatchAccepted) in Open's write, or, when finish and that group is all
// the batch wrote, BatchFinished last, in one write that opens and
// finishes it (OpenFinished). The store gets one try, as the Open before
// the calls ran did: a log it does not take is lost, which cancels the
// batch, and Run's stream then answers Unavailable (refusal). Its caller
// holds wmu.
func (l *batchLog) openFirst(finish bool) error {
	e := l.e
	n := l.nextGroup()
	whole := finish && n == len(l.pending)
	ctx, cancel := context.WithTimeout(l.b.callerCtx, appendTimeout)
	defer cancel()
	var err error
	if whole {
		err = e.deps.EventLog.(store.LogOpenFinisher).OpenFinished(ctx, l.name, e.deps.Replica, e.cfg.BatchTTL, l.group...)
	} else {
		err = e.deps.EventLog.Open(ctx, l.name, e.deps.Replica, e.cfg.BatchLease, e.cfg.BatchTTL, l.group...)
	}
	if err != nil {
		clear(l.group)
		l.kmu.Lock()
		l.openErr = err
		l.kmu.Unlock()
		if l.failed.CompareAndSwap(false, true) {
			e.deps.Logger.Warn("the store did not open a detached batch's event log; the batch is refused, its read-only calls cancelled",
				"batch_id", l.b.id, "error", err)
			l.b.cancel(errLogLost)
		}
		return err
	}
	l.opened = true
	l.taken(n, whole)
	if !whole {
		e.renewLog(l)
	}
	return nil
}

// refusal is the error of a batch whose log the store did not open, for
// ctx (Run's stream's); nil when it did.
func (l *batchLog) refusal(ctx context.Context) error {
	l.kmu.Lock()
	err := l.openErr
	l.kmu.Unlock()
	if err == nil {
		return nil
	}
	return storeError(ctx, err)
}

// startedAt is when the batch of log name started: when its log was
// opened, with BatchAccepted (or, for a log opened by an older replica,
// the start it noted in Vars); false when it is not known.
func (e *Engine) startedAt(ctx context.Context, name string) (time.Time, bool) {
	if info, err := e.deps.EventLog.Stat(ctx, name); err == nil && !info.Opened.IsZero() {
		return info.Opened, true
	}
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

// renewed does what follows the renewal of the lease at a tick of the
// engine's renewals (renewals.go), err being the store's answer for this
// log (asked false: it was not renewed, its writes having failed for
// good): it appends what the store did not take before, and carries out a
// cancellation requested on another replica (each tick when nothing
// notifies the batch of one, else every fallbackPoll, or after a look that
// failed: see signals.go). A store that does not answer is asked again
// next tick: the lease it holds outlasts a stall shorter than it. It runs
// on the renewals' goroutine, one batch after another: what waits for the
// store (the flush, the look) goes on a goroutine of the batch's.
func (l *batchLog) renewed(asked bool, err error) {
	e := l.e
	l.mu.Lock()
	finishing := l.stopped
	l.mu.Unlock()
	if finishing {
		// finish began while this renewal was under way (stop does not
		// wait for one that has begun): the store may have refused it
		// for the Finish that followed, a finished log being no one's
		// to renew, and finish renews the lease itself from then on.
		// Taken as lost, it logged a batch that had finished as
		// cancelled.
		return
	}
	switch {
	case !asked:
	case lostFor(err):
		l.lost(err)
	case err != nil:
		// Logged once for the stall, not at every tick (twice a second
		// a batch: a 20 s stall wrote 37 lines for one).
		if l.renewFailures == 0 {
			l.renewFailing = time.Now()
			e.deps.Logger.Warn("could not renew a detached batch's lease; trying again at each tick, logging once it is renewed",
				"batch_id", l.b.id, "error", err)
		}
		l.renewFailures++
	default:
		if l.renewFailures > 0 {
			e.deps.Logger.Info("renewed a detached batch's lease again", "batch_id", l.b.id,
				"failed_renewals", l.renewFailures, "for", time.Since(l.renewFailing).Round(time.Millisecond).String())
			l.renewFailures = 0
		}
		l.flushAfterRenewal()
	}
	if now := time.Now(); l.lookAgain.Swap(false) || now.Sub(l.looked) >= e.poll(l.watched, 0) {
		l.looked = now
		l.woken() // on a goroutine of its own, as a notice's look
	}
}

// flushAfterRenewal appends, on a goroutine of its own, the events the
// store did not take before, if any: none while the writer is writing
// (it holds wmu, and flushes them itself), nor while the last renewal's
// flush is under way.
func (l *batchLog) flushAfterRenewal() {
	if !l.wmu.TryLock() {
		return
	}
	idle := len(l.pending) == 0
	l.wmu.Unlock()
	if idle || !l.flushing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.flushing.Store(false)
		l.wmu.Lock()
		defer l.wmu.Unlock()
		l.flush()
	}()
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
	l.mu.Unlock()
	l.e.dropLog(l)
	l.unwatch()
}

// run is a detached batch's writer (batch.writeLog): it takes the events
// the calls have queued, a group at a time, and appends each group in one
// write, until the lanes have ended; then it finishes the log with
// BatchFinished, and returns true. When nothing is queued it returns
// false, giving its runner up, and the next event (or the lanes' end)
// runs it again on a runner (resume): a batch whose calls wait, for an
// approval or a slow tool, keeps no goroutine of its writer's meanwhile.
// One writer runs at a time all the same: Take parks it, and wakes it,
// under the outbox's lock.
func (l *batchLog) run() bool {
	b := l.b
	for {
		// A log not yet opened is opened before its writer parks, with
		// what is queued or with BatchAccepted alone.
		wake := l.resume
		if !l.opened && !l.failed.Load() {
			wake = nil
		}
		group, open, parked := b.out.Take(l.taking[:0], wake)
		if parked {
			// Nothing more of l is this writer's: the next event may
			// have run another already.
			return false
		}
		for _, p := range group {
			l.write(p.Event)
		}
		if open {
			l.wmu.Lock()
			l.flush()
			l.wmu.Unlock()
		}
		for i, p := range group {
			b.out.Sent(p)
			group[i] = outbox.Pending{}
		}
		l.taking = group[:0]
		if !open {
			break
		}
	}
	l.taking = nil
	l.write(b.finished())
	l.finish()
	return true
}

// write numbers ev and queues it for the next write, after coalescing
// progress (see coalesce).
func (l *batchLog) write(ev *toolwirev1.ExecuteBatchResponse) {
	if ev.GetProgress() != nil {
		if ev = l.coal.Progress(ev, time.Now()); ev == nil {
			return
		}
	} else if r := ev.GetResult(); r != nil {
		if p := l.coal.Flush(int(r.GetIndex())); p != nil {
			l.queue(p)
		}
	}
	l.queue(ev)
}

// queue numbers ev and queues it after what the store has not taken yet.
func (l *batchLog) queue(ev *toolwirev1.ExecuteBatchResponse) {
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
	if all := l.e.unstored.Add(int64(len(data))); all > l.e.maxUnstored {
		l.e.unstored.Add(-int64(len(data)))
		l.lost(errors.New("the store took no event for longer than the server can buffer (" +
			strconv.FormatInt(all-int64(len(data)), 10) + " bytes of detached batches' events waiting for it)"))
		return
	}
	l.pending = append(l.pending, pendingEntry{seq: b.seq, data: data})
	l.pendingBytes += len(data)
}

// nextGroup returns how many of the pending events go in the next write,
// and their data (in l.group). Its caller holds wmu.
func (l *batchLog) nextGroup() int {
	n, size := 0, 0
	l.group = l.group[:0]
	for _, p := range l.pending {
		if n > 0 && (n == maxGroupEvents || size+len(p.data) > maxGroupBytes) {
			break
		}
		l.group = append(l.group, p.data)
		n++
		size += len(p.data)
	}
	return n
}

// taken drops the first n pending events, which the store has taken. Its
// caller holds wmu.
func (l *batchLog) taken(n int, finished bool) {
	l.took(l.pending[:n], finished)
	freed := 0
	for i := range n {
		freed += len(l.pending[i].data)
		l.pending[i] = pendingEntry{}
	}
	l.pendingBytes -= freed
	l.e.unstored.Add(-int64(freed))
	l.pending = l.pending[n:]
	clear(l.group)
}

// skipLanded drops the pending events that an earlier write whose answer
// was lost did append, as Stat tells; it returns what Stat said. Its
// caller holds wmu.
func (l *batchLog) skipLanded() (store.LogInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	info, err := l.e.deps.EventLog.Stat(ctx, l.name)
	cancel()
	if err != nil {
		if errors.Is(err, store.ErrLogNotFound) {
			l.lost(err)
		}
		return info, err
	}
	l.unsure = false
	n := 0
	for n < len(l.pending) && l.pending[n].seq <= info.Last {
		n++
	}
	if n > 0 {
		l.taken(n, info.Finished)
	}
	return info, nil
}

// flush appends the pending events in order, a group per write; it stops
// at the first write the store does not take, and returns that error. Its
// caller holds wmu.
func (l *batchLog) flush() error {
	e := l.e
	if l.failed.Load() {
		return errLogLost
	}
	if !l.opened {
		if err := l.openFirst(false); err != nil {
			return err
		}
	}
	if len(l.pending) > 0 && l.unsure {
		if _, err := l.skipLanded(); err != nil {
			return err
		}
	}
	for len(l.pending) > 0 {
		n := l.nextGroup()
		last := l.pending[n-1].seq
		ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
		i, err := e.deps.EventLog.Append(ctx, l.name, e.deps.Replica, l.group...)
		cancel()
		switch {
		case lostFor(err):
			l.lost(err)
			return err
		case err != nil:
			l.unsure = true
			return err
		case i != last:
			err := errors.New("the log's numbering differs from the batch's: entry " + strconv.FormatUint(i, 10) + " for event " + strconv.FormatUint(last, 10))
			l.lost(err)
			return err
		}
		l.taken(n, false)
	}
	return nil
}

// flushFinish appends the pending events, the last group (BatchFinished
// with it) in the write that finishes the log. Its caller holds wmu.
func (l *batchLog) flushFinish() error {
	e := l.e
	if l.failed.Load() {
		return errLogLost
	}
	if !l.opened {
		if err := l.openFirst(true); err != nil {
			return err
		}
		if len(l.pending) == 0 {
			return nil // opened and finished in one write
		}
	}
	if l.unsure {
		info, err := l.skipLanded()
		if err != nil {
			return err
		}
		if info.Finished && len(l.pending) == 0 {
			return nil // the Finish whose answer was lost landed
		}
	}
	for len(l.pending) > maxGroupEvents {
		if err := l.flush(); err != nil {
			return err
		}
	}
	n := l.nextGroup()
	if n < len(l.pending) {
		if err := l.flush(); err != nil {
			return err
		}
		n = l.nextGroup()
	}
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	err := e.deps.EventLog.Finish(ctx, l.name, e.deps.Replica, e.cfg.BatchTTL, l.group...)
	if lostFor(err) {
		// A Finish whose answer was lost, and was sent again, may have landed.
		if info, serr := e.deps.EventLog.Stat(ctx, l.name); serr == nil && info.Finished && (n == 0 || info.Last >= l.pending[n-1].seq) {
			err = nil
		}
	}
	switch {
	case err == nil:
		l.taken(n, true)
	case !lostFor(err):
		l.unsure = true
	}
	return err
}

// finish ends the log after BatchFinished: once the store has taken every
// event, it is finished, to live BatchTTL more. Until then it tries again,
// renewing the lease. It gives up once the store has renewed no lease for
// two leases (it does not answer): the log is left to its readers, who end
// it as owner lost. A store that renews the lease but refuses the events
// (a full disk refuses a large result and takes a renewal) keeps the
// batch running until it takes them: the replica is not lost, and its
// readers get the calls' own results rather than a cancellation that
// invites running them again.
func (l *batchLog) finish() {
	l.stop()
	defer l.writerDone()
	defer l.dropPending()
	e := l.e
	giveUp := time.Now().Add(2 * e.cfg.BatchLease)
	backoff := 50 * time.Millisecond
	for {
		if l.failed.Load() {
			return
		}
		l.wmu.Lock()
		err := l.flushFinish()
		l.wmu.Unlock()
		if err == nil || l.failed.Load() {
			return
		}
		if lostFor(err) {
			e.deps.Logger.Error("could not finish a detached batch's event log", "batch_id", l.b.id, "error", err)
			return
		}
		if time.Now().After(giveUp) {
			e.deps.Logger.Error("the store did not take a detached batch's last events; its readers will end it as owner lost",
				"batch_id", l.b.id, "pending", len(l.pending), "error", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
		switch err := e.deps.EventLog.RenewLog(ctx, l.name, e.deps.Replica, e.cfg.BatchLease); {
		case err == nil:
			giveUp = time.Now().Add(2 * e.cfg.BatchLease)
		case lostFor(err):
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

// dropPending forgets the events the store never took once the writer has
// given up on them (the log lost, the store renewing no lease for two
// leases, the engine closed): its readers end the batch as owner lost.
func (l *batchLog) dropPending() {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.e.unstored.Add(-int64(l.pendingBytes))
	l.pending, l.pendingBytes = nil, 0
}

// join adds a reader of the kept events that has read up to seq.
func (l *batchLog) join(seq uint64) *keptReader {
	r := &keptReader{seq: seq}
	l.kmu.Lock()
	l.readers = append(l.readers, r)
	l.kmu.Unlock()
	return r
}

// leave removes r; what only it wanted is no longer kept.
func (l *batchLog) leave(r *keptReader) {
	l.kmu.Lock()
	defer l.kmu.Unlock()
	for i, x := range l.readers {
		if x == r {
			l.readers = append(l.readers[:i], l.readers[i+1:]...)
			break
		}
	}
	l.trim()
}

// took records that the store has taken ps (finishing the log with them,
// when finished): they are kept for the readers, who are woken.
func (l *batchLog) took(ps []pendingEntry, finished bool) {
	l.kmu.Lock()
	if len(ps) > 0 {
		l.stored = ps[len(ps)-1].seq
	}
	if len(l.readers) > 0 {
		for _, p := range ps {
			l.kept = append(l.kept, p)
			l.keptBytes += len(p.data)
		}
	}
	l.complete = l.complete || finished
	l.trim()
	close(l.wake)
	l.wake = make(chan struct{})
	l.kmu.Unlock()
}

// writerDone records that the writer has stopped, finished or not, and wakes
// the readers.
func (l *batchLog) writerDone() {
	l.kmu.Lock()
	l.done = true
	close(l.wake)
	l.wake = make(chan struct{})
	l.kmu.Unlock()
}

// trim drops the kept events every reader has read, and the oldest past
// the bounds. Its caller holds kmu.
func (l *batchLog) trim() {
	read := l.stored
	for _, r := range l.readers {
		read = min(read, r.seq)
	}
	n := 0
	for n < len(l.kept) && (l.kept[n].seq <= read || len(l.kept)-n > maxKeptEvents || l.keptBytes > maxKeptBytes) {
		l.keptBytes -= len(l.kept[n].data)
		l.kept[n] = pendingEntry{}
		n++
	}
	l.kept = l.kept[n:]
	if len(l.kept) == 0 {
		l.kept = nil
	}
}

// read sends sink the batch's events after r's seq, then its live ones,
// until BatchFinished, as readLog does (its errors are readLog's), for a
// reader on the batch's own replica: from the events kept once the store
// took them, and from the store when they are no longer kept or the
// writer stopped without finishing the log.
func (l *batchLog) read(ctx context.Context, r *keptReader, sink Sink) error {
	defer l.leave(r)
	var batch []pendingEntry
	for {
		l.kmu.Lock()
		seq := r.seq
		behind := seq < l.stored && (len(l.kept) == 0 || l.kept[0].seq > seq+1)
		if behind || (l.done && !l.complete && seq >= l.stored) {
			openErr := l.openErr
			l.kmu.Unlock()
			l.leave(r)
			if openErr != nil {
				return storeError(ctx, openErr)
			}
			return l.e.readLog(ctx, l.name, seq, sink)
		}
		batch = batch[:0]
		for _, p := range l.kept {
			if p.seq > seq {
				batch = append(batch, p)
			}
		}
		wake := l.wake
		l.kmu.Unlock()
		if len(batch) == 0 {
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return contextError(ctx.Err())
			}
		}
		for i, p := range batch {
			ev := &toolwirev1.ExecuteBatchResponse{}
			if err := proto.Unmarshal(p.data, ev); err != nil {
				return errorf(Internal, "event %d of the batch's log cannot be read: %v", p.seq, err)
			}
			batch[i] = pendingEntry{}
			if err := sink.Send(ev); err != nil {
				return err
			}
			if ev.GetFinished() != nil {
				return nil
			}
			l.kmu.Lock()
			r.seq = p.seq
			l.kmu.Unlock()
		}
		l.kmu.Lock()
		l.trim()
		l.kmu.Unlock()
	}
}
