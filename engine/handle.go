package engine

import (
	"context"
	"errors"
)

// A batch's run and its stream are two things. The run (batch.run, the
// lanes and their calls) ends when every call has its result; the events
// it produces go to one writer, which numbers them from 1 (eventLog) and
// hands them to the batch's readers. A batch is found by its ID, made when
// it is admitted, in Engine.batches, where Cancel and Attach look it up.
//
// How a batch meets its stream depends on whether it is detached:
//
//   - A batch that is not detached has one reader, the stream Run was
//     given, and the writer serves it directly on Run's goroutine (the fast
//     path: nothing is kept, no goroutine is added). When that stream ends
//     (its context, or a failed Send), the reader is gone and the batch is
//     cancelled, as it always was: its calls get CANCELLED results, which
//     are recorded, and nothing new starts.
//   - A detached batch's (BatchOptions.detach) writer runs on a goroutine of its own and keeps
//     the events; Run's stream is one attachment among any number (Attach),
//     each reading from the seq it asks for. A stream ending only detaches
//     that reader: the batch runs on until its calls end or it is cancelled
//     (Cancel, Drain, its deadline).

// admit counts a batch in, giving it its ID and keeping it by that ID (for
// Cancel, Attach and draining), or refuses it while draining or
// overloaded.
func (e *Engine) admit(b *batch, cancel context.CancelCauseFunc) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.draining:
		return errorf(Unavailable, "server is shutting down; retry on another replica")
	case len(e.batches) >= e.cfg.MaxConcurrentBatches:
		return errorf(ResourceExhausted, "server is running its limit of %d batches; retry with backoff", e.cfg.MaxConcurrentBatches)
	}
	b.id = newID()
	for e.batches[b.id] != nil { // 63 random bits: a clash is all but impossible, but would cross two batches
		b.id = newID()
	}
	b.cancel = cancel
	e.batches[b.id] = b
	e.active.Add(1)
	if !e.watching {
		e.watching = true
		go e.watchSends()
	}
	return nil
}

// release forgets a batch that has ended.
func (e *Engine) release(b *batch) {
	e.mu.Lock()
	delete(e.batches, b.id)
	e.mu.Unlock()
	e.active.Done()
}

// lookup returns the running batch batchID of ctx's caller, or a NotFound
// error: a batch of another caller is not found either, so an ID reveals
// nothing to whoever guesses it. A unary batch (Call's) has no ID anyone
// was told, and is never found.
func (e *Engine) lookup(ctx context.Context, batchID string) (*batch, error) {
	e.mu.Lock()
	b := e.batches[batchID]
	e.mu.Unlock()
	if b == nil || b.unary || CallerFrom(b.callerCtx) != CallerFrom(ctx) {
		return nil, errorf(NotFound, "no batch %s is running for this caller", shorten(batchID))
	}
	return b, nil
}

// errCancelRequested is the cause of a batch's cancellation by Cancel.
type errCancelRequested struct{ reason string }

func (e *errCancelRequested) Error() string {
	if e.reason == "" {
		return "the batch was cancelled"
	}
	return "the batch was cancelled: " + e.reason
}

// MaxReasonBytes bounds the reason Cancel is given; a longer one is cut.
const MaxReasonBytes = 1024

// Cancel cancels the running batch batchID of ctx's caller, with reason
// (cut to MaxReasonBytes), as a client's disconnect from a batch that is
// not detached does: its calls that had not ended get CANCELLED results
// saying the reason, nothing new starts, and the batch ends with
// BatchFinished. It returns once the cancellation is made, not when the
// batch has ended; NotFound when no such batch of this caller runs.
func (e *Engine) Cancel(ctx context.Context, batchID, reason string) error {
	b, err := e.lookup(ctx, batchID)
	if err != nil {
		return err
	}
	if len(reason) > MaxReasonBytes {
		reason = cutUTF8(reason, MaxReasonBytes) + "…"
	}
	b.cancel(&errCancelRequested{reason: reason})
	return nil
}

// Attach sends sink the events of the running detached batch batchID of
// ctx's caller after the one numbered afterSeq (all of them for 0), then
// its live events, and returns once it has sent BatchFinished (nil), ctx
// has ended, or a Send has failed (that error). Attaching does not change
// the batch; ending the attachment only detaches its reader. It returns
// NotFound when no such batch runs, or it is not detached (its one reader
// is its own stream), and InvalidArgument for an afterSeq past the last
// event sent.
func (e *Engine) Attach(ctx context.Context, batchID string, afterSeq uint64, sink Sink) error {
	b, err := e.lookup(ctx, batchID)
	if err != nil {
		return err
	}
	if !b.detached {
		return errorf(NotFound, "batch %s is not detached: only its own stream reads it", shorten(batchID))
	}
	if last := b.log.last(); afterSeq > last {
		return errorf(InvalidArgument, "after_seq %d is past the batch's last event, %d", afterSeq, last)
	}
	return b.log.read(ctx, afterSeq, sink)
}

// runDetached is run for a detached batch: it starts the batch's writer on
// a goroutine of its own, whose context keeps ctx's values (the caller, the trace) but
// not its cancellation or deadline, and reads its events to sink as an
// attachment until the batch ends or ctx does. Before BatchAccepted it
// refuses the batch as Run does.
func (e *Engine) runDetached(ctx context.Context, b *batch) error {
	// Detached from the stream on purpose: the batch outlives it.
	b.callerCtx = context.WithoutCancel(ctx)
	b.log = &eventLog{}
	runCtx, cancel := context.WithCancelCause(b.callerCtx)
	if err := e.admit(b, cancel); err != nil {
		cancel(nil)
		return err
	}
	b.scope = logScope{b: b, i: -1}
	runCtx = b.obsBatchStarted(context.WithValue(runCtx, logScopeKey{}, &b.scope))
	var cancelTimeout context.CancelFunc = func() {}
	if d := b.req.GetOptions().GetTimeout(); d != nil && d.AsDuration() > 0 {
		runCtx, cancelTimeout = context.WithTimeoutCause(runCtx, d.AsDuration(), errBatchTimeout)
	}
	// The first slot is waited for while the caller waits, so that an
	// overloaded server still refuses the batch before accepting it.
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	err := b.reserve(runCtx)
	stop()
	if err != nil {
		cancelTimeout()
		cancel(nil)
		b.obsBatchEnded(err)
		e.release(b)
		return err
	}
	go func() {
		defer e.release(b)
		defer cancel(nil)
		defer cancelTimeout()
		defer b.dropReserved()
		e.runners.Go(func() { b.run(runCtx) })
		_ = b.write(cancel) // a detached batch's writer only appends: it cannot fail
		b.send(b.finished())
		b.log.end()
		b.obsBatchEnded(nil)
	}()
	return b.log.read(ctx, 0, b.sink)
}

// cancelRequested is what a call's result says when Cause is Cancel's.
func cancelRequested(cause error) (string, bool) {
	var c *errCancelRequested
	if !errors.As(cause, &c) {
		return "", false
	}
	if c.reason == "" {
		return "cancelled: the batch was cancelled", true
	}
	return "cancelled: the batch was cancelled (" + c.reason + ")", true
}
