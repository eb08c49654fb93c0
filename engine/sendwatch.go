package engine

// A client that stops reading a batch's events stops the engine too: a
// transport under flow control holds the writer in Send, and the batch's
// calls wait to report behind it. The send watchdog ends such a batch
// after SendTimeout and asks its sink (a Stopper) to end the Send.

import (
	"context"
	"time"
)

// watchSends runs while batches do: every tick it ends the streams whose
// writer has been in one Send for SendTimeout. admit starts it; it returns
// once no batch is running, so an idle server has no goroutine for it.
func (e *Engine) watchSends() {
	tick := time.NewTicker(min(max(e.cfg.SendTimeout/8, time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	for range tick.C {
		now := time.Now().UnixNano()
		e.mu.Lock()
		if len(e.cancels) == 0 {
			e.watching = false
			e.mu.Unlock()
			return
		}
		for b, cancel := range e.cancels {
			if since := b.sending.Load(); since != 0 && time.Duration(now-since) >= e.cfg.SendTimeout && b.timedOut.CompareAndSwap(false, true) {
				b.endStream(cancel)
			}
		}
		e.mu.Unlock()
	}
}

// endStream ends a batch whose sink has taken SendTimeout over one Send
// (its client reads nothing): its calls are cancelled (keyed results that
// are done stay recorded; see idemClaim.settle) and the sink, if it can, is
// made to end that Send.
func (b *batch) endStream(cancel context.CancelCauseFunc) {
	log := b.e.cfg.Logger
	cancel(ErrSendTimeout)
	st, ok := b.sink.(Stopper)
	if !ok {
		st, ok = b.streamCtx.Value(StopperKey{}).(Stopper)
	}
	if !ok || !st.StopSend() {
		log.ErrorContext(b.streamCtx, "client read nothing for the send timeout; its calls are cancelled, but its stream cannot be ended without the tap handle of Server.ServerOptions",
			"batch_id", b.id, "send_timeout", b.e.cfg.SendTimeout.String())
		return
	}
	log.WarnContext(b.streamCtx, "client read nothing for the send timeout; ending its stream and cancelling its calls",
		"batch_id", b.id, "send_timeout", b.e.cfg.SendTimeout.String())
}
