package engine

import (
	"context"
	"errors"
	"strconv"

	"github.com/toolwire/toolwire/engine/internal/sequence"
	"github.com/toolwire/toolwire/tools"
)

// A batch's lanes order its calls because they arrive together. A surface
// whose calls arrive one at a time (MCP's tools/call, a unary CallTool)
// runs each as a batch of one, so the calls of one session that a client
// sends concurrently need another way to keep the same rules. Sequence is
// that way: a first-in, first-out readers-writer queue per session.

// Sequence orders the calls of one session that arrive one at a time, by
// the rules lanes apply within a batch. Calls with the same sessionID and
// the same caller (see CallerFrom; sessions are scoped by caller, as
// session variables are):
//
//   - a safe call (its tool read-only, or declared safe in Config.Safe)
//     starts at once while only safe calls of the session run and none
//     waits, up to Config.MaxParallel of them at once;
//   - any other call (unsafe, unknown, or not permitted to the caller)
//     waits until every earlier call of the session has ended, and every
//     later call waits for it;
//   - calls start in arrival order: a safe call that arrives while an
//     unsafe one waits queues behind it rather than overtaking it.
//
// So [read, read, write, read] sent concurrently runs as a batch with those
// calls would: both reads together, then the write, then the last read.
// Safety is judged against snap, the snapshot the call then runs against.
//
// Sequence returns when the call may start, with done, which ends the
// call's turn; call it once the call has its result (after Run returns).
// A call with no sessionID is not ordered: Sequence returns at once, and
// the call runs as its own batch of one. When ctx ends before the call's
// turn, the call leaves the queue and Sequence returns Canceled or
// DeadlineExceeded; when MaxCallsPerBatch calls of the session, or of all
// the caller's sessions together, already wait, it returns
// ResourceExhausted; a sessionID longer than MaxIDBytes
// is InvalidArgument, as in a batch.
func (e *Engine) Sequence(ctx context.Context, snap *tools.Snapshot, sessionID, tool string) (done func(), err error) {
	if sessionID == "" {
		return func() {}, nil
	}
	if n := len(sessionID); n > MaxIDBytes {
		return nil, errorf(InvalidArgument, "session_id %s is %d bytes; the limit is %d", shorten(sessionID), n, MaxIDBytes)
	}
	safe := false
	if t, ok := snap.Lookup(tool); ok && e.Permits(ctx, tool) {
		safe = e.safe(t)
	}
	caller := strconv.Quote(CallerFrom(ctx))
	done, err = e.seq.Enter(ctx, caller, caller+"/"+sessionID, safe, e.cfg.MaxParallel, e.cfg.MaxCallsPerBatch)
	var full *sequence.FullError
	switch {
	case errors.As(err, &full):
		return nil, NewError(ResourceExhausted, err)
	case err != nil:
		return nil, contextError(err)
	}
	return done, nil
}
