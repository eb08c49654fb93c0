package engine

import (
	"context"
	"errors"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
	"google.golang.org/protobuf/proto"
)

// A batch's run and its stream are two things. The run (batch.run, the
// lanes and their calls) ends when every call has its result; the events
// it produces go to one writer, which numbers them from 1 (eventLog) and
// hands them to the batch's readers. A batch is found by its ID, made when
// it is admitted, in Engine.batches, where Cancel and Attach look it up.
//
// Every batch starts the same way (Engine.start) and runs its lanes on a
// runner; how it meets its stream depends on whether it is detached:
//
//   - A batch that is not detached has one reader, the stream Run was
//     given, and the writer serves it directly on Run's goroutine (the fast
//     path: nothing is kept, no goroutine is added). When that stream ends
//     (its context, or a failed Send), the reader is gone and the batch is
//     cancelled, as it always was: its calls get CANCELLED results, which
//     are recorded, and nothing new starts.
//   - A detached batch's (BatchOptions.detach) writer (batch.writeLog)
//     runs on a runner of its own while it has events to write (none
//     while its calls wait) and appends the events to the batch's log in the store
//     (eventlog.go); Run's stream is one attachment among any number
//     (Attach), on any replica sharing the store, each reading from the
//     seq it asks for. A stream ending only detaches that reader: the
//     batch runs on until its calls end or it is cancelled (Cancel, from
//     any replica; Drain; its deadline).

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
	if b == nil || b.unary || b.caller != CallerFrom(ctx) {
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
// BatchFinished. A detached batch running on another replica is cancelled
// through the store: its owner is notified at once (signals.go), or finds
// the request at its next look. It returns once the cancellation is made or
// asked for, not when the batch has ended; InvalidArgument for a batchID
// longer than MaxIDBytes; NotFound when no such batch of
// this caller runs.
func (e *Engine) Cancel(ctx context.Context, batchID, reason string) error {
	if err := checkID("batch_id", batchID); err != nil {
		return err
	}
	if len(reason) > MaxReasonBytes {
		reason = cutUTF8(reason, MaxReasonBytes) + "…"
	}
	if b, err := e.lookup(ctx, batchID); err == nil {
		if b.lanesEnded.Load() {
			// Its calls all have results: a client that read
			// BatchFinished may cancel before the batch is forgotten,
			// and is told what it would be told a moment later.
			return errorf(NotFound, "no batch %s is running for this caller", shorten(batchID))
		}
		b.cancel(&errCancelRequested{reason: reason})
		return nil
	}
	name := logName(CallerFrom(ctx), batchID)
	info, err := e.deps.EventLog.Stat(ctx, name)
	switch {
	case errors.Is(err, store.ErrLogNotFound) || (err == nil && info.Finished):
		return errorf(NotFound, "no batch %s is running for this caller", shorten(batchID))
	case err != nil:
		return storeError(ctx, err)
	}
	if err := (cancelMail{e.deps.Vars}).request(ctx, name, reason, e.cfg.BatchTTL); err != nil {
		return storeError(ctx, err)
	}
	e.signal(ctx, cancelTopic(name))
	return nil
}

// storeError is the *Error for a failure of the store a surface's request
// needed.
func storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return contextError(ctx.Err())
	}
	return errorf(Unavailable, "the store of detached batches failed: %v; retry", err)
}

// Attach sends sink the events of the detached batch batchID of ctx's
// caller after the one numbered afterSeq (all of them for 0), then its
// live events, and returns once it has sent BatchFinished (nil), ctx has
// ended, or a Send has failed (that error). It works on any replica
// sharing the store (Deps.EventLog), while the batch runs and for
// BatchTTL after it finished. Attaching does not change the batch; ending
// the attachment only detaches its reader. When the replica running the
// batch was lost (its lease ran out), the calls that had not ended get
// CANCELLED results, owner lost, and the batch ends. It returns NotFound
// when no such batch is known (or it was not detached: its one reader is
// its own stream), and InvalidArgument for an afterSeq past the last event
// sent or a batchID longer than MaxIDBytes (no batch has one).
func (e *Engine) Attach(ctx context.Context, batchID string, afterSeq uint64, sink Sink) error {
	if err := checkID("batch_id", batchID); err != nil {
		return err
	}
	name := logName(CallerFrom(ctx), batchID)
	info, err := e.deps.EventLog.Stat(ctx, name)
	switch {
	case errors.Is(err, store.ErrLogNotFound):
		return errorf(NotFound, "no detached batch %s is known for this caller (never sent with detach, expired, or lost by the store)", shorten(batchID))
	case err != nil:
		return storeError(ctx, err)
	case afterSeq > info.Last:
		return errorf(InvalidArgument, "after_seq %d is past the batch's last event, %d", afterSeq, info.Last)
	}
	return e.watchReader(ctx, sink, func(ctx context.Context, sink Sink) error { return e.readLog(ctx, name, afterSeq, sink) })
}

// readLog sends sink the log's events after seq and then its live ones
// until BatchFinished; see Attach.
func (e *Engine) readLog(ctx context.Context, name string, seq uint64, sink Sink) error {
	el := e.deps.EventLog
	// A store that does not answer is asked again, backing off, for as
	// long as the batch's lease outlasts a stall: the batch goes on, and
	// so does its reader. Past that the reader ends with the error.
	var failing time.Time
	// Since when the store has refused to let this reader end a log whose
	// owner was lost (zero: it has not).
	var unended time.Time
	storeFailed := func(err error) error {
		if ctx.Err() != nil || errors.Is(err, store.ErrLogNotFound) || errors.Is(err, store.ErrDropped) {
			return logReadError(ctx, err)
		}
		if failing.IsZero() {
			failing = time.Now()
		}
		if time.Since(failing) > e.cfg.BatchLease {
			return logReadError(ctx, err)
		}
		select {
		case <-time.After(recoverRetry):
			return nil
		case <-ctx.Done():
			return contextError(ctx.Err())
		}
	}
	for {
		var readErr error
		for ent, err := range el.After(ctx, name, seq) {
			if err != nil {
				readErr = err
				break
			}
			ev := &toolwirev1.ExecuteBatchResponse{}
			if err := proto.Unmarshal(ent.Data, ev); err != nil {
				return errorf(Internal, "event %d of the batch's log cannot be read: %v", ent.Index, err)
			}
			if err := sink.Send(ev); err != nil {
				return err
			}
			seq, unended = ent.Index, time.Time{}
			if ev.GetFinished() != nil {
				return nil
			}
		}
		if readErr != nil {
			if err := storeFailed(readErr); err != nil {
				return err
			}
			continue
		}
		info, err := el.Stat(ctx, name)
		if err == nil {
			failing = time.Time{}
		}
		switch {
		case err != nil:
			if err := storeFailed(err); err != nil {
				return err
			}
			continue
		case info.Last > seq:
			continue
		case info.Finished:
			if e.endsFinished(ctx, name, info.Last) {
				// The reader asked for what follows the last event,
				// BatchFinished: there is nothing to send.
				return nil
			}
			return errorf(Internal, "the batch's log ended without BatchFinished")
		case !info.Owned:
			err := e.recoverLost(ctx, name)
			switch {
			case err == nil:
				unended = time.Time{}
			case errors.Is(err, store.ErrLeaseLost):
				// Another reader is ending it: look again shortly
				// rather than at once.
				select {
				case <-time.After(recoverRetry):
				case <-ctx.Done():
					return contextError(ctx.Err())
				}
			default:
				// The store answers reads but refuses, or does not
				// answer, the writes that would end the log (a full
				// Redis, a full disk): no one can end it until it takes
				// them, so its readers wait a lease for that, as for a
				// store that does not answer, then end UNAVAILABLE
				// rather than ask again for ever.
				if unended.IsZero() {
					unended = time.Now()
				}
				if time.Since(unended) > e.cfg.BatchLease {
					return logReadError(ctx, err)
				}
				select {
				case <-time.After(recoverRetry):
				case <-ctx.Done():
					return contextError(ctx.Err())
				}
			}
			continue
		}
		if err := el.WaitLog(ctx, name, seq); err != nil {
			if err := storeFailed(err); err != nil {
				return err
			}
			continue
		}
		failing = time.Time{}
		if ctx.Err() != nil {
			return contextError(ctx.Err())
		}
	}
}

// endsFinished tells whether entry last of the log name is BatchFinished.
func (e *Engine) endsFinished(ctx context.Context, name string, last uint64) bool {
	if last == 0 {
		return false
	}
	for ent, err := range e.deps.EventLog.After(ctx, name, last-1) {
		if err != nil {
			return false
		}
		ev := &toolwirev1.ExecuteBatchResponse{}
		return proto.Unmarshal(ent.Data, ev) == nil && ev.GetFinished() != nil
	}
	return false
}

// logReadError is the *Error for a failed read of a batch's log.
func logReadError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return contextError(ctx.Err())
	case errors.Is(err, store.ErrLogNotFound):
		return errorf(NotFound, "the batch's events are gone from the store: expired (batch_ttl), or lost by it (a Redis restarted without persistence), and a batch still running then is cancelled")
	case errors.Is(err, store.ErrDropped):
		return errorf(Internal, "events of the batch after the one asked for are no longer kept")
	}
	return storeError(ctx, err)
}

// errOwnerLost is what the open calls of a batch whose replica was lost
// are told.
const ownerLostText = "cancelled: the replica running this batch was lost before the call ended (owner lost); it may have run in part. Send it again: with its idempotency key, a call that had finished is replayed, not run twice"

// recoverRetry is how long a reader waits before looking again at a log
// whose owner was lost when it could not end the log itself.
const recoverRetry = 100 * time.Millisecond

// recoverLost ends the log name of a batch whose owner's lease ran out
// before it finished: it takes the log over (one reader of all that may
// notice at once does), gives every call without a result a CANCELLED one,
// owner lost, and ends it with BatchFinished. A reader that does not win
// the takeover reads what the winner writes. It returns nil once it ended
// the log, store.ErrLeaseLost (or ErrLogNotFound) when another took it
// over or it ended meanwhile, else the store's error.
func (e *Engine) recoverLost(ctx context.Context, name string) error {
	el := e.deps.EventLog
	if err := el.TakeOver(ctx, name, e.deps.Replica, e.cfg.BatchLease); err != nil {
		if errors.Is(err, store.ErrLogNotFound) {
			return store.ErrLeaseLost
		}
		return err
	}
	var accepted *toolwirev1.BatchAccepted
	var results []*toolwirev1.CallResult
	var last uint64
	for ent, err := range el.After(ctx, name, 0) {
		if err != nil {
			break
		}
		last = ent.Index
		ev := &toolwirev1.ExecuteBatchResponse{}
		if proto.Unmarshal(ent.Data, ev) != nil {
			continue
		}
		switch {
		case ev.GetAccepted() != nil:
			accepted = ev.GetAccepted()
		case ev.GetResult() != nil:
			results = append(results, ev.GetResult())
		}
	}
	write := func(ev *toolwirev1.ExecuteBatchResponse) error {
		last++
		ev.Seq = last
		data, err := proto.Marshal(ev)
		if err == nil {
			_, err = el.Append(ctx, name, e.deps.Replica, data)
		}
		return err
	}
	ended := make(map[string]bool, len(results))
	for _, r := range results {
		ended[r.GetCallId()] = true
	}
	i := 0
	for _, lane := range accepted.GetLanes() {
		for _, id := range lane.GetCallIds() {
			if !ended[id] {
				r := &toolwirev1.CallResult{CallId: id, Index: uint32(i), IsError: true, ErrorKind: toolwirev1.ErrorKind_ERROR_KIND_CANCELLED,
					Content: []*toolwirev1.Content{textBlock(ownerLostText)}}
				if err := write(resultEventFor(r)); err != nil {
					return err
				}
				results = append(results, r)
			}
			i++
		}
	}
	// Its real duration, up to now, when openLog noted its start.
	var d time.Duration
	if t, ok := e.startedAt(ctx, name); ok {
		d = time.Since(t)
	}
	ev, f := finishedEventFor(accepted.GetBatchId(), d)
	for _, r := range results {
		count(f, r)
	}
	if err := write(ev); err != nil {
		return err
	}
	return el.Finish(ctx, name, e.deps.Replica, e.cfg.BatchTTL)
}

// count counts r in f, as BatchFinished counts results.
func count(f *toolwirev1.BatchFinished, r *toolwirev1.CallResult) {
	switch {
	case r.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_SKIPPED:
		f.Skipped++
	case r.GetIsError():
		f.Failed++
	default:
		f.Succeeded++
	}
	switch r.GetErrorKind() {
	case toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT:
		f.Cancelled++
	}
	if r.GetReplayed() {
		f.Replayed++
	}
}

// GetBatch returns the state of the detached batch batchID of ctx's caller,
// with the results of its calls that have ended, from the store: on any
// replica, while it runs and for BatchTTL after. A batch whose replica was
// lost is ended first, as Attach does. Its state is FINISHED once it has
// ended, CANCELLED when it ended with a call cancelled (CancelBatch, the
// server's shutdown, its replica lost); AWAITING_APPROVAL while a call
// waits for approval; else RUNNING. NotFound as for Attach.
func (e *Engine) GetBatch(ctx context.Context, batchID string) (*toolwirev1.GetBatchResponse, error) {
	if err := checkID("batch_id", batchID); err != nil {
		return nil, err
	}
	name := logName(CallerFrom(ctx), batchID)
	el := e.deps.EventLog
	info, err := el.Stat(ctx, name)
	switch {
	case errors.Is(err, store.ErrLogNotFound):
		return nil, errorf(NotFound, "no detached batch %s is known for this caller (never sent with detach, expired, or lost by the store)", shorten(batchID))
	case err != nil:
		return nil, storeError(ctx, err)
	case !info.Finished && !info.Owned:
		e.recoverLost(ctx, name)
	}
	resp := &toolwirev1.GetBatchResponse{BatchId: batchID, State: toolwirev1.BatchState_BATCH_STATE_RUNNING}
	waiting := map[string]bool{}
	cancelled := false
	for ent, err := range el.After(ctx, name, 0) {
		if err != nil {
			return nil, logReadError(ctx, err)
		}
		ev := &toolwirev1.ExecuteBatchResponse{}
		if err := proto.Unmarshal(ent.Data, ev); err != nil {
			return nil, errorf(Internal, "event %d of the batch's log cannot be read: %v", ent.Index, err)
		}
		resp.LastSeq = ent.Index
		switch {
		case ev.GetAwaitingApproval() != nil:
			waiting[ev.GetAwaitingApproval().GetCallId()] = true
		case ev.GetResult() != nil:
			r := ev.GetResult()
			delete(waiting, r.GetCallId())
			resp.Results = append(resp.Results, r)
			cancelled = cancelled || r.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_CANCELLED
		case ev.GetFinished() != nil:
			resp.Finished = ev.GetFinished()
		}
	}
	switch {
	case resp.Finished != nil && cancelled:
		resp.State = toolwirev1.BatchState_BATCH_STATE_CANCELLED
	case resp.Finished != nil:
		resp.State = toolwirev1.BatchState_BATCH_STATE_FINISHED
	case len(waiting) > 0:
		resp.State = toolwirev1.BatchState_BATCH_STATE_AWAITING_APPROVAL
	}
	return resp, nil
}

// writeLog is a detached batch's writer, on a runner of its own while it
// has events to write (batchLog.run gives the runner up meanwhile): it
// appends the batch's events to its log, where Run's stream and every
// other attachment read them (readLog), and ends the batch once its lanes
// have. Before BatchAccepted, Run refuses a detached batch as it does any
// (start), and with Unavailable when the store cannot open its log: in
// start, or, for a log opened with its first events (deferOpen), here,
// its read-only calls having run.
func (b *batch) writeLog() {
	if b.log.run() {
		b.end(b.log.refusal(context.Background()))
	}
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
