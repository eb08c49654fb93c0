package engine

// Each batch's outbox bounds the events waiting for its client
// (MaxStreamBufferBytes), but their sum grows with the number of streams:
// 200 clients that read nothing took 750 MB of RSS. The budget
// (engine/internal/outbox's Budget, which every outbox charges) bounds the
// sum (MaxBufferedBytes) in the spirit of Envoy's overload manager: it never
// makes anyone wait and never refuses a batch, so callers that read their
// streams keep their latency whatever others leave unread; when what the
// outboxes hold passes it, the send watchdog ends the streams of the
// clients that are not reading, those holding the most first, until what
// the others hold fits. Ending one works as the send timeout does: its
// calls are cancelled, keyed results that are done stay recorded, and its
// sink is told to stop.

import (
	"cmp"
	"errors"
	"slices"
	"time"
)

// ErrOverBudget is the cause with which a batch is cancelled when the
// events waiting for slow readers passed Config.MaxBufferedBytes and its
// client, not reading, held the most of them.
var ErrOverBudget = errors.New("the server's events waiting for slow readers passed their limit, and this stream's client held the most unread")

// stallAfter is how long a stream's writer must have been in one Send
// before the budget may end the stream: the Send of a client that reads
// returns as soon as the transport has room, so only a client that has
// stopped reading (or reads far slower than its calls produce) stays in
// one this long.
const stallAfter = 50 * time.Millisecond

// shed ends the streams of clients that are not reading, those holding the
// most first, until what the others hold fits in the budget. A stream
// already ended counts as freed (its writer is giving its bytes back), and
// one whose writer has been in its Send for less than stallAfter is spared.
// now is the time in Unix nanoseconds; e.mu is held.
func (e *Engine) shed(now int64) {
	g := e.budget
	excess := g.Held() - g.Max()
	if g.Max() <= 0 || excess <= 0 {
		return
	}
	type holder struct {
		b    *batch
		held int64
	}
	var stalled []holder
	for _, b := range e.batches {
		h := b.out.Held()
		switch since := b.sending.Load(); {
		case h <= 0:
		case b.ended.Load() != endNone:
			excess -= h
		case since != 0 && now-since >= int64(stallAfter):
			stalled = append(stalled, holder{b, h})
		}
	}
	slices.SortFunc(stalled, func(x, y holder) int { return cmp.Compare(y.held, x.held) })
	for _, s := range stalled {
		if excess <= 0 {
			return
		}
		if s.b.ended.CompareAndSwap(endNone, endOverBudget) {
			e.shedCount.Add(1)
			s.b.endStream(s.b.cancel, ErrOverBudget, time.Duration(now-s.b.sending.Load()), s.held)
			excess -= s.held
		}
	}
}

// Why a stream was ended before its batch was done (batch.ended).
const (
	endNone int32 = iota
	endSendTimeout
	endOverBudget
)

// endReasons name the reasons in metrics and logs: the setting that ended
// the stream.
var endReasons = [...]string{endSendTimeout: "send_timeout", endOverBudget: "max_buffered_bytes"}

// endedError is what Run returns for a stream the watchdog ended.
func (b *batch) endedError() error {
	switch b.ended.Load() {
	case endSendTimeout:
		// A stopped transport has already told its client; this error is
		// for the surface's own telemetry and logs.
		return errorf(DeadlineExceeded, "the client read nothing of the stream for %s; the server ended it and cancelled its calls", b.e.cfg.SendTimeout)
	case endOverBudget:
		return errorf(ResourceExhausted, "the client left the stream's events unread while the server's memory for unread events (max_buffered_bytes, %d bytes) was spent, holding more of it than others; the server ended the stream and cancelled its calls. Read the stream as it comes, then retry",
			b.e.budget.Max())
	}
	return nil
}
