package engine

// A detached batch's readers (AttachBatch, and Run's own stream of a
// detached batch) send from its log, not from its writer, so the send
// watchdog's look at each batch's writer (sendwatch.go) does not see them:
// a client that stopped reading held its reader in one Send for as long as
// it kept its connection, whatever SendTimeout said. The watchdog looks at
// the readers too: one whose Send has taken SendTimeout is ended as a
// batch's stream is (its Stopper asked to end the Send), and only that
// reader: the batch runs on.

import (
	"context"
	"sync/atomic"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/monotime"
)

// logReader is a reader of a batch's log, as the send watchdog sees it.
type logReader struct {
	Sink
	sending atomic.Int64 // when the Send under way began (monotime); 0 between Sends
	ended   atomic.Bool  // the watchdog ended it
	cancel  context.CancelCauseFunc
	stopper Stopper // nil: none; the read is only cancelled
	ctx     context.Context
}

func (r *logReader) Send(ev *toolwirev1.ExecuteBatchResponse) error {
	r.sending.Store(monotime.Now())
	err := r.Sink.Send(ev)
	r.sending.Store(0)
	return err
}

// watchReader runs read, which sends a log's events to sink, under the
// send watchdog until it returns: a Send that takes SendTimeout ends it
// with DeadlineExceeded.
func (e *Engine) watchReader(ctx context.Context, sink Sink, read func(context.Context, Sink) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &logReader{Sink: sink, cancel: cancel, ctx: ctx}
	if st, ok := sink.(Stopper); ok {
		r.stopper = st
	} else if st, ok := ctx.Value(StopperKey{}).(Stopper); ok {
		r.stopper = st
	}
	e.mu.Lock()
	if e.readers == nil {
		e.readers = make(map[*logReader]struct{})
	}
	e.readers[r] = struct{}{}
	if !e.watching {
		e.watching = true
		go e.watchSends()
	}
	e.mu.Unlock()
	err := read(ctx, r)
	e.mu.Lock()
	delete(e.readers, r)
	e.mu.Unlock()
	if r.ended.Load() {
		return errorf(DeadlineExceeded, "the client read nothing of the stream for %s; the server ended it (the batch runs on: attach again to read it)", e.cfg.SendTimeout)
	}
	return err
}

// endReader ends a reader whose Send has taken SendTimeout: its read is
// cancelled, and its Stopper, if any, ends the Send. e.mu is held.
func (e *Engine) endReader(r *logReader, stalled time.Duration) {
	r.cancel(ErrSendTimeout)
	stopped := r.stopper != nil && r.stopper.StopSend(ErrSendTimeout)
	if !stopped {
		e.deps.Logger.ErrorContext(r.ctx, "a detached batch's reader read nothing for the send timeout; its read is cancelled, but its stream cannot be ended without the tap handle of Server.ServerOptions",
			"unread_for", stalled.String())
		return
	}
	e.deps.Logger.WarnContext(r.ctx, "a detached batch's reader read nothing for the send timeout; ending its stream (the batch runs on)",
		"send_timeout", e.cfg.SendTimeout.String())
}
