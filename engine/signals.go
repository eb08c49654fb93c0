package engine

import (
	"context"
	"time"
)

// A cancel or an approval asked on a replica other than the batch's owner
// is written to the owner's mailbox (vars.go), the record, and then
// signalled (Deps.Signals, store.Signals): the owner watches the topic of
// each mailbox it waits on (one per detached batch it runs, one per call
// it holds for approval) and looks at the mailbox as soon as it is woken,
// so the cancel or the decision takes effect within a round trip or two
// of the store rather than at the owner's next poll.
//
// A notice can be lost (a subscription dropped, the store's server
// restarted); the store then wakes every watcher once it watches again,
// and the owner still looks at each mailbox every fallbackPoll, slowly,
// for what nothing covers (a notice that could not be sent after the
// mailbox was written). Without Signals, past the store's bound on
// watchers, or while the store cannot receive notices (Listening: its
// subscription is down, or refused by its server), the owner polls as
// before notices existed: a held call every approvalPoll, a detached
// batch at each lease renewal (Engine.renewTick).
//
// The topics are the store's format, shared by replicas of different
// versions like the mailboxes': change them only with a migration.

// fallbackPoll is how often the owner looks at a mailbox it watches, for
// the notices that were lost with nothing to say so.
const fallbackPoll = 5 * time.Second

// signalTimeout bounds the sending of a notice, once its mailbox is
// written: past it the owner's fallback look covers it.
const signalTimeout = time.Second

// cancelTopic is the topic of the cancel mailbox of the batch whose log
// is named log.
func cancelTopic(log string) string { return "cancel:" + log }

// approvalTopic is the topic of the decision for call callID of batch
// batchID.
func approvalTopic(batchID, callID string) string { return "approval:" + batchID + "/" + callID }

// watch calls wake whenever topic is signalled (or notices may have been
// lost) until stop; wake must return at once. watched is false when
// nothing will call it (no Signals, or the store's bound reached): the
// caller polls as often as it would without notices.
func (e *Engine) watch(topic string, wake func()) (stop func(), watched bool) {
	if e.deps.Signals == nil {
		return func() {}, false
	}
	return e.deps.Signals.Watch(topic, wake)
}

// poll is how often a watcher looks at its mailbox now: unwatched, or
// while the store hears no notices, as often as it must (without);
// watched and listening, every fallbackPoll (or what a test set). It is
// asked again before each look, the store's listening being a state that
// comes and goes.
func (e *Engine) poll(watched bool, without time.Duration) time.Duration {
	if !watched || !e.deps.Signals.Listening() {
		return without
	}
	return e.fallback()
}

// fallback is the slow look of a watcher that hears notices.
func (e *Engine) fallback() time.Duration {
	if e.fallbackPoll > 0 {
		return e.fallbackPoll
	}
	return fallbackPoll
}

// signal tells the owner of the mailbox topic names that it was written.
// It is sent even when ctx (the request's) ends now, the mailbox being
// written already; a failure is logged, and the owner's fallback look
// covers it.
func (e *Engine) signal(ctx context.Context, topic string) {
	if e.deps.Signals == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), signalTimeout)
	defer cancel()
	if err := e.deps.Signals.Signal(sctx, topic); err != nil {
		e.deps.Logger.WarnContext(ctx, "could not notify the replica that owns a batch of a cancel or approval left for it; it will find it at its next look", "error", err, "within", e.fallback())
	}
}

// woken is a detached batch's wake for its cancel mailbox: it looks at the
// mailbox on a goroutine of its own, one at a time, looking again when
// woken meanwhile (so no wake after the last look is lost, and a burst of
// them costs one look or two).
func (l *batchLog) woken() {
	if l.wakes.Add(1) > 1 {
		return // a look is under way, and will look again
	}
	go func() {
		for {
			n := l.wakes.Load()
			l.checkCancel()
			if l.wakes.Add(-n) == 0 {
				return
			}
		}
	}()
}

// checkCancel cancels the batch when a cancellation was asked for it on
// another replica. A look the store did not answer is taken again at the
// next lease renewal (renewed), not left to the fallback poll: a wake that
// came as the store came back (a resubscription) must not be wasted.
func (l *batchLog) checkCancel() {
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	reason, ok, err := (cancelMail{l.e.deps.Vars}).requested(ctx, l.name)
	switch {
	case err != nil:
		l.lookAgain.Store(true)
	case ok:
		l.b.cancel(&errCancelRequested{reason: reason})
	}
}
