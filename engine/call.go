package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// outcome is what a tool's handler returned.
type outcome struct {
	res *tools.Result
	err error
}

// startCall takes call i through validation, runs it under its deadline and
// sends its result. It normally returns true once the result is handed to the
// writer. When the tool outstays its cancellation by the abandon grace, a
// watchdog sends the result and calls onAbandon instead (nil: it continues
// the batch after this call's lane), and startCall returns false whenever
// the tool finally returns: the caller has been replaced and must do
// nothing more for the batch.
func (b *batch) startCall(ctx context.Context, lane, i int, onAbandon func()) bool {
	call := b.req.GetCalls()[i]
	ctx = b.startCallSpan(ctx, lane, i)
	if ctx.Err() != nil {
		kind, msg := cancelled(ctx)
		b.finishUnstarted(i, kind, msg+" before the call started; nothing was run")
		return true
	}
	if b.refuse(i) {
		return true
	}
	t := b.tools[i]
	if t == nil {
		b.finishUnstarted(i, toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL, b.unknownTool(i, call))
		return true
	}
	args, err := t.ValidateArguments(call.GetArguments())
	if err != nil {
		b.finishUnstarted(i, toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS,
			fmt.Sprintf("invalid arguments for %q: %v", t.Name, err))
		return true
	}
	// Nothing starts while the client leaves the batch's events unread:
	// the call's result could only wait too.
	b.out.waitRoom(ctx.Done())
	// The key comes before the slot: a replay or a wait for a duplicate
	// elsewhere needs no slot.
	claim, done := b.claim(ctx, i, t, args)
	if done {
		return true // replayed, joined or refused: nothing runs here
	}
	if res := b.acquireSlot(ctx, i, t); res != nil {
		claim.settle(res) // timed out or cancelled unrun: releases the key
		return true
	}
	defer b.releaseSlot(i) // a backstop: execute gives the slot back as soon as the tool returns
	b.emitStarted(startedEventFor(call.GetCallId(), i, lane))
	b.callRunning(i)
	return b.execute(ctx, lane, i, t, args, claim, onAbandon)
}

// timeout is how long call i may run: the earliest of its own timeout, the
// tool's limit and the server's limit; the RPC's deadline is applied too.
func (b *batch) timeout(call *toolwirev1.ToolCall, t *tools.Tool) time.Duration {
	d := b.e.cfg.DefaultCallTimeout
	if t.Timeout > 0 {
		d = t.Timeout
	}
	if ct := call.GetTimeout(); ct != nil && ct.AsDuration() > 0 {
		d = ct.AsDuration()
		if t.Timeout > 0 {
			d = min(d, t.Timeout)
		}
	}
	return min(d, b.e.cfg.MaxCallTimeout)
}

// callRun is one running call: the state its tool, its watchdog and its
// result share. It is one allocation, where closures would be many.
type callRun struct {
	b         *batch
	lane, i   int
	tool      *tools.Tool
	ctx       context.Context // the batch's
	callCtx   context.Context // the call's: deadline, idle timeout
	start     time.Time
	timeout   time.Duration
	rpcLimit  bool // the RPC's deadline set the call's
	handle    *tools.Call
	claim     *idemClaim // the call's idempotency key, if it has one
	idle      *time.Timer
	onAbandon func()

	decided  atomic.Bool // whoever sets it sends the result
	mu       sync.Mutex
	returned bool        // the tool has returned
	grace    *time.Timer // the watchdog's, armed when callCtx ends
}

// execute runs the tool on the calling goroutine (a goroutine hop per call
// is most of a small call's cost) and sends its result; see startCall.
func (b *batch) execute(ctx context.Context, lane, i int, t *tools.Tool, args []byte, claim *idemClaim, onAbandon func()) bool {
	call := b.req.GetCalls()[i]
	cfg := &b.e.cfg
	r := &callRun{b: b, lane: lane, i: i, tool: t, ctx: ctx, start: time.Now(), timeout: b.timeout(call, t), claim: claim, onAbandon: onAbandon}
	deadline := r.start.Add(r.timeout)
	if dl, ok := b.streamCtx.Deadline(); ok && dl.Add(-cfg.DeadlineMargin).Before(deadline) {
		deadline, r.rpcLimit = dl.Add(-cfg.DeadlineMargin), true
	}
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if cfg.IdleTimeout > 0 {
		var cancelIdle context.CancelCauseFunc
		callCtx, cancelIdle = context.WithCancelCause(callCtx)
		defer cancelIdle(nil)
		r.idle = time.AfterFunc(cfg.IdleTimeout, func() { cancelIdle(errIdle) })
		defer r.idle.Stop()
	}
	r.callCtx = callCtx
	r.handle = tools.NewCall(call.GetCallId(), t.Name, args, r.progress)
	r.handle.SessionID = b.req.GetSessionId()
	r.handle.Caller = CallerFrom(ctx)
	r.handle.SetSession(b.session(ctx))

	stopWatch := context.AfterFunc(callCtx, r.watch)
	o := b.invoke(callCtx, t, r.handle)
	// The slot goes back before the result is sent: what waits for a slow
	// reader holds memory (the outbox's budget), not a slot another caller
	// could use. An abandoned tool keeps its slot until this point, so
	// tools that ignore cancellation cannot be stacked without limit.
	b.releaseSlot(i)
	r.mu.Lock()
	r.returned = true
	if r.grace != nil {
		r.grace.Stop()
	}
	r.mu.Unlock()
	stopWatch()

	if !r.decided.CompareAndSwap(false, true) {
		return false // abandoned: the watchdog has sent the result
	}
	r.decide(o, false)
	return true
}

// progress forwards a report of the tool's, extending the idle timeout.
func (r *callRun) progress(p tools.Progress) {
	if r.idle != nil {
		r.idle.Reset(r.b.e.cfg.IdleTimeout)
	}
	boundProgress(&p, r.b.e.cfg.MaxResultBytes)
	r.b.emit(progressEvent(r.b.req.GetCalls()[r.i].GetCallId(), r.i, p))
}

// watch runs when the call's context ends: unless the tool returns within
// the abandon grace, it is abandoned.
func (r *callRun) watch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.returned {
		r.grace = time.AfterFunc(r.b.e.cfg.AbandonGrace, r.abandon)
	}
}

// abandon sends the result of a tool that ignored its cancellation and lets
// the batch go on without it.
func (r *callRun) abandon() {
	if !r.decided.CompareAndSwap(false, true) {
		return
	}
	cfg := &r.b.e.cfg
	r.b.e.abandoned.Add(1) // its slot stays taken until the tool returns; see execute
	r.b.callAbandoned(r.i)
	cfg.Logger.WarnContext(r.ctx, "tool ignored cancellation; abandoned", "grace", cfg.AbandonGrace)
	r.decide(outcome{}, true)
	if r.onAbandon != nil {
		r.onAbandon()
	} else {
		r.b.continueAfter(r.lane)
	}
}

// decide sends the call's result.
func (r *callRun) decide(o outcome, abandoned bool) {
	r.handle.Close() // no progress event may follow the result
	res := r.b.newTimedResult(r.i, 0)
	r.b.judge(r.ctx, r.callCtx, r.tool, r.timeout, r.rpcLimit, o, abandoned, res)
	setDuration(res.Duration, time.Since(r.start))
	r.claim.settle(res) // recorded before it is sent
	r.b.finish(r.i, res)
}

// invoke calls the tool's handler, turning a panic into an error: the model
// gets the message, the log gets the stack.
func (b *batch) invoke(ctx context.Context, t *tools.Tool, handle *tools.Call) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			b.e.cfg.Logger.ErrorContext(ctx, "tool panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			o = outcome{err: fmt.Errorf("the tool failed unexpectedly (panic: %v)", r)}
		}
	}()
	res, err := t.Handler(ctx, handle)
	return outcome{res: res, err: err}
}

// judge fills res from the tool's outcome. ctx is the batch's context and
// callCtx the call's.
func (b *batch) judge(ctx, callCtx context.Context, t *tools.Tool, timeout time.Duration, rpcDeadline bool, o outcome, abandoned bool, res *toolwirev1.CallResult) {
	cfg := &b.e.cfg
	failed := o.err != nil || o.res == nil || o.res.IsError
	if callCtx.Err() != nil && (abandoned || failed) {
		// Cancellation outranks whatever the tool said about it.
		var kind toolwirev1.ErrorKind
		var msg string
		switch cause := context.Cause(callCtx); {
		case ctx.Err() != nil:
			kind, msg = cancelled(ctx)
		case errors.Is(cause, errIdle):
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, fmt.Sprintf("timed out: no progress for %s", cfg.IdleTimeout)
		case rpcDeadline:
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, "timed out: the client's deadline was reached"
		default:
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, fmt.Sprintf("timed out after %s", timeout)
		}
		if abandoned {
			msg += fmt.Sprintf("; the tool did not stop within %s and was abandoned", cfg.AbandonGrace)
		}
		errorResult(res, kind, msg)
		return
	}
	if o.err != nil {
		o.res = &tools.Result{Content: []tools.Content{{Text: o.err.Error()}}, IsError: true}
	}
	if o.res == nil {
		return // a tool that returns nothing succeeded with nothing to say
	}
	if len(o.res.StructuredContent) > 0 && !o.res.IsError {
		if err := t.ValidateOutput(o.res.StructuredContent); err != nil {
			cfg.Logger.ErrorContext(ctx, "tool returned invalid structured content", "error", err)
			errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR,
				fmt.Sprintf("the tool returned output that does not match its declared output schema: %v", err))
			return
		}
	}
	shape(o.res, cfg.MaxResultBytes, res)
	if res.IsError {
		res.ErrorKind = toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR
		if o.res.ErrorKind != 0 {
			res.ErrorKind = toolwirev1.ErrorKind(o.res.ErrorKind)
		}
	}
}

func progressEvent(callID string, i int, p tools.Progress) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{
		CallId: callID, Index: uint32(i), Progress: p.Progress, Total: p.Total, Message: p.Message, Output: p.Output,
	}}}
}
