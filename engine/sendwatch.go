package engine

// A client that stops reading a batch's events stops the engine too: a
// transport under flow control holds the writer in Send, and the batch's
// calls wait to report behind it. The send watchdog ends such a batch
// after SendTimeout and asks its sink (a Stopper) to end the Send; it also
// ends the streams that hold the most when the events waiting for slow
// readers pass MaxBufferedBytes (budget.go).

import (
	"context"
	"time"

	"github.com/toolwire/toolwire/internal/monotime"
)

// watchSends runs while batches or detached batches' readers do: every
// tick it ends the streams whose writer, or reader (readwatch.go), has
// been in one Send for SendTimeout, abandons the tools that
// outstay their cancellation by AbandonGrace (so a call is abandoned
// between the grace and the grace plus a tick, at most a quarter of it,
// after its cancellation), and whenever the buffered events pass their
// budget (and every budgetRetry while they stay over it) it sheds streams.
// admit and watchReader start it; it returns once no batch or reader is
// running, so an idle server has no goroutine for it.
func (e *Engine) watchSends() {
	tick := time.NewTicker(min(max(e.cfg.SendTimeout/8, time.Millisecond), 250*time.Millisecond, max(e.cfg.AbandonGrace/4, time.Millisecond)))
	defer tick.Stop()
	var retry <-chan time.Time // set while over the budget
	for {
		select {
		case <-tick.C:
		case <-e.budget.Over():
		case <-retry:
		}
		now := monotime.Now()
		e.mu.Lock()
		if len(e.batches) == 0 && len(e.readers) == 0 {
			e.watching = false
			e.mu.Unlock()
			return
		}
		for _, b := range e.batches {
			if since := b.sending.Load(); since != 0 && time.Duration(now-since) >= e.cfg.SendTimeout && b.ended.CompareAndSwap(endNone, endSendTimeout) {
				b.endStream(b.cancel, ErrSendTimeout, time.Duration(now-since), b.out.Held())
			}
			for i := range b.calls {
				if r := b.calls[i].running.Load(); r != nil && r.overstayed(now) {
					go r.abandon() // it sends the result, which may wait for the reader: not under e.mu
				}
			}
		}
		for r := range e.readers {
			if since := r.sending.Load(); since != 0 && time.Duration(now-since) >= e.cfg.SendTimeout && r.ended.CompareAndSwap(false, true) {
				e.endReader(r, time.Duration(now-since))
			}
		}
		e.shed(now)
		e.mu.Unlock()
		retry = nil
		if e.budget.OverBudget() {
			// Ended streams give their bytes back as their writers drain,
			// and clients that stopped reading just now become stalled
			// after stallAfter: look again soon, not at every event.
			retry = time.After(budgetRetry)
		}
	}
}

// budgetRetry is how often the watchdog looks again while the buffered
// events stay over their budget.
const budgetRetry = stallAfter / 5

// endStream ends a batch whose client is not reading, for cause
// (ErrSendTimeout or ErrOverBudget): its calls are cancelled (keyed results
// that are done stay recorded; see idemClaim.settle), the sink, if it can,
// is made to end its Send, and the end is logged and counted. stalled is
// how long the writer has been in its Send, held the bytes the batch holds
// of the budget.
func (b *batch) endStream(cancel context.CancelCauseFunc, cause error, stalled time.Duration, held int64) {
	e := b.e
	reason := b.ended.Load()
	cancel(cause)
	b.obsStreamEnded(endReasons[reason])
	st, ok := b.sink.(Stopper)
	if !ok {
		st, ok = b.callerCtx.Value(StopperKey{}).(Stopper)
	}
	stopped := ok && st.StopSend(cause)
	log := e.deps.Logger
	why := "events waiting for slow readers passed max_buffered_bytes and this client, not reading, held the most"
	if reason == endSendTimeout {
		why = "client read nothing for the send timeout"
	}
	switch {
	case !stopped:
		log.ErrorContext(b.callerCtx, why+"; its calls are cancelled, but its stream cannot be ended without the tap handle of Server.ServerOptions",
			"batch_id", b.id, "reason", endReasons[reason], "unread_for", stalled.String(), "held_bytes", held)
	case reason == endSendTimeout:
		log.WarnContext(b.callerCtx, why+"; ending its stream and cancelling its calls",
			"batch_id", b.id, "send_timeout", e.cfg.SendTimeout.String(), "held_bytes", held)
	default:
		log.WarnContext(b.callerCtx, why+"; ending its stream and cancelling its calls",
			"batch_id", b.id, "held_bytes", held, "unread_for", stalled.String(),
			"buffered_bytes", e.budget.Held(), "max_buffered_bytes", e.budget.Max())
	}
}
