package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/engine/internal/slots"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/logcut"
	"github.com/toolwire/toolwire/tools"
)

// callState is what a batch keeps of one of its calls, in one slice
// (batch.calls) indexed like the request's calls.
type callState struct {
	tool    *tools.Tool             // nil when unknown or not permitted
	cutFrom int                     // the length of the name as sent, when newBatch cut it; else 0
	args    json.RawMessage         // the validated arguments, from validation until the call ends
	claim   *idemClaim              // its idempotency key while it runs; nil without one
	slot    slots.Slot              // its concurrency slot while it runs
	info    CallInfo                // what the Observer is told of it; see observe.go
	obsCtx  context.Context         // what the Observer's CallStarted returned; nil before
	scope   logScope                // names the call in log lines; see LogHandler
	ended   callSummary             // its result, as BatchFinished counts it
	running atomic.Pointer[callRun] // while its tool runs: the send watchdog's abandonment, requestApproval, Batches
	refused bool                    // the caller may not call the tool it names (Admission.Permitted, asked by newBatch)
	// approval is the decision on the call, held for approval, once a
	// person made it (awaitApproval); CallInfo.Approval reads it.
	approval atomic.Pointer[Approval]
}

// The per-call path is an explicit chain (the MCP go-sdk's middleware
// habit, flattened): before a call's tool runs, the steps below run in
// order; each returns nil to let the call go on, or the call's result,
// which ends the path there. Then callRun runs the tool under the call's
// lifecycle, and finish (batch.go) is the one place a call ends, whoever
// ends it: record (idempotency), telemetry, log, send.
//
//	cancelled? → permission → known tool → validation → admission (allow, deny, hold)
//	→ recorded before it runs (an audit trail that must) → backpressure → idempotency
//	→ limits → run (callRun) → record → send (finish)
//
// A step does not send events: what it decides is the call's result, which
// finish sends. The one exception is a call the admission holds for
// approval (approval.go), which must tell the client and the person asked
// that the call waits, so it emits CallAwaitingApproval (through b.emit, as
// progress is) before it waits.
type step func(ctx context.Context, b *batch, i int) *toolwirev1.CallResult

// steps are the call's path before its tool runs, in order. A new per-call
// concern is a step inserted after validation, so it sees the arguments,
// and before idempotency and limits, so a refused or waiting call holds no
// key and no slot, as admission is. Who may call what with which
// arguments is not a new step but a rule of the Admission (package
// policy), asked once in admitted.
var steps = [...]step{
	notCancelled,
	permitted, // admission.go: the plan's answer
	known,
	validArguments,
	admitted, // admission.go: the verdict; a held call waits (approval.go)
	recorded, // observe.go: a CallRecorder's record, before the call runs
	roomToReport,
	idempotent, // idempotency.go
	slotTaken,  // limits.go
}

// notCancelled ends a call whose batch ended before it started.
func notCancelled(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	if ctx.Err() == nil {
		return nil
	}
	kind, msg := cancelled(ctx)
	return b.failure(i, kind, msg+" before the call started; nothing was run")
}

// known ends a call of a tool that does not exist (or that permitted let
// through as a wrapper).
func known(_ context.Context, b *batch, i int) *toolwirev1.CallResult {
	if b.calls[i].tool != nil {
		return nil
	}
	return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL, b.unknownTool(i, b.req.GetCalls()[i]))
}

// validArguments checks the call's arguments against its tool's schema. A
// keyed call whose arguments the schema refuses gets the result recorded
// under its key for those arguments, if there is one (replayRefused).
func validArguments(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	c := &b.calls[i]
	args, err := c.tool.ValidateArguments(b.req.GetCalls()[i].GetArguments())
	if err != nil {
		if res := replayRefused(ctx, b, i); res != nil {
			return res
		}
		return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS, fmt.Sprintf("invalid arguments for %q: %v", c.tool.Name, err))
	}
	c.args = args
	return nil
}

// roomToReport waits while the client leaves the batch's events unread:
// the call's result could only wait too.
func roomToReport(ctx context.Context, b *batch, _ int) *toolwirev1.CallResult {
	if b.unary || b.out.HasRoom() {
		return nil // a unary batch reports nothing
	}
	b.out.WaitRoom(ctx.Done())
	return nil
}

// startCall takes call i along its path and sends its result. It normally
// returns true once the result is handed to the writer. When the tool
// outstays its cancellation by the abandon grace, the call's watchdog sends
// the result and continues the lane instead (see callRun.abandon), and
// startCall returns false whenever the tool finally returns: the caller has
// been replaced and must do nothing more for the batch.
func (b *batch) startCall(ctx context.Context, lane, i int, onAbandon func()) bool {
	c := &b.calls[i]
	c.scope = logScope{b: b, i: i}
	ctx = b.obsCallStarted(context.WithValue(ctx, logScopeKey{}, &c.scope), lane, i)
	if res := b.beforeRun(ctx, i); res != nil {
		b.finish(i, res)
		return true
	}
	defer c.slot.Release(b.e.limits) // a backstop: callRun gives the slot back as soon as the tool returns
	if !b.unary {
		b.emitStarted(startedEventFor(b.req.GetCalls()[i].GetCallId(), i, lane))
	}
	b.obsCallRunning(i)
	r := &callRun{b: b, lane: lane, i: i, ctx: ctx, onAbandon: onAbandon}
	return r.run()
}

// beforeRun runs the call's steps: nil when the call is to run, else its
// result. A step that panics (toolwire's code, or what it calls: a
// schema's validator, a policy, a store) ends this call INTERNAL, not the
// server and every batch it runs; the log gets the stack.
func (b *batch) beforeRun(ctx context.Context, i int) (res *toolwirev1.CallResult) {
	defer func() {
		if p := recover(); p != nil {
			v := logcut.String(fmt.Sprint(p))
			b.e.deps.Logger.ErrorContext(ctx, "a call's step panicked", "panic", v, "stack", string(debug.Stack()))
			res = b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_INTERNAL, fmt.Sprintf("toolwire failed on this call before running it (panic: %s); nothing was run", v))
		}
	}()
	for _, step := range steps {
		if res := step(ctx, b, i); res != nil {
			return res
		}
	}
	return nil
}

// outcome is what a tool's handler returned.
type outcome struct {
	res *tools.Result
	err error
}

// callRun is one running call's lifecycle, all of it: its deadline and idle
// timeout, the tool's invocation on the calling goroutine (a goroutine hop
// per call is most of a small call's cost), who sends the result (decided),
// and who continues the lane after an abandoned call. It is one allocation,
// where closures would be many. A tool that ignores its cancellation is
// abandoned by the engine's watchdog (watchAbandoned), which looks at the
// running calls every tick rather than arming a context.AfterFunc per call:
// that was six of a call's allocations and two locks, for a rare event.
type callRun struct {
	b         *batch
	lane, i   int
	ctx       context.Context // the batch's, with the call's span
	callCtx   context.Context // the call's: deadline, idle timeout
	start     time.Time
	timeout   time.Duration
	rpcLimit  bool // the caller's deadline set the call's
	handle    *tools.Call
	idle      *time.Timer
	onAbandon func() // continues the lane after an abandoned call; nil: continueAfter

	decided  atomic.Bool  // whoever sets it sends the result
	returned atomic.Bool  // the tool has returned
	doneSeen atomic.Int64 // when the watchdog first saw callCtx ended (Unix ns); 0 before

	lone loneCtx // callCtx, when the call is its batch's only one (batch.alone)
}

// errCallDeadline is the cause with which a batch of one call (see
// batch.alone) is cancelled when the call's deadline passes: the call's
// context is the batch's. It is a DeadlineExceeded, as the cause of a
// context's own deadline would be.
var errCallDeadline = fmt.Errorf("the call's deadline passed: %w", context.DeadlineExceeded)

// ownCause reports whether cause, the cause of a call's context, is the
// call's own (its deadline or idle timeout) rather than its batch's end.
func ownCause(cause error) bool {
	return errors.Is(cause, errCallDeadline) || errors.Is(cause, errIdle)
}

// loneCtx is the context of a batch's only call: the batch's, which the
// call's deadline and idle timeout cancel (callRun.run), with the call's
// deadline on it. As a context of its own would, it reports the deadline
// and, once that has passed, DeadlineExceeded.
type loneCtx struct {
	context.Context // the batch's, with the call's values
	deadline        time.Time
}

func (c *loneCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true // the batch's, earlier
	}
	return c.deadline, true
}

func (c *loneCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), errCallDeadline) {
		return context.DeadlineExceeded
	}
	return err
}

// run runs the tool under the call's deadline and sends its result; see
// startCall for what it returns.
func (r *callRun) run() bool {
	b, c := r.b, &r.b.calls[r.i]
	call := b.req.GetCalls()[r.i]
	cfg := &b.e.cfg
	r.start = time.Now()
	var deadline time.Time
	deadline, r.timeout, r.rpcLimit = b.deadline(r.i, r.start)
	if b.alone() {
		// The batch's one call: its deadline and idle timeout end the
		// batch, with causes that say so, and its context is the
		// batch's with the call's deadline on it (lone). This spares the
		// commonest batch a context of the call's own, its place in the
		// batch's and its done channel: a tenth of what a call held in
		// flight costs the server.
		r.lone = loneCtx{Context: r.ctx, deadline: deadline}
		r.callCtx = &r.lone
		expire := time.AfterFunc(time.Until(deadline), func() { b.cancel(errCallDeadline) })
		defer expire.Stop()
		if cfg.IdleTimeout > 0 {
			r.idle = time.AfterFunc(cfg.IdleTimeout, func() { b.cancel(errIdle) })
			defer r.idle.Stop()
		}
	} else {
		callCtx, cancel := context.WithDeadline(r.ctx, deadline)
		defer cancel()
		if cfg.IdleTimeout > 0 {
			var cancelIdle context.CancelCauseFunc
			callCtx, cancelIdle = context.WithCancelCause(callCtx)
			defer cancelIdle(nil)
			r.idle = time.AfterFunc(cfg.IdleTimeout, func() { cancelIdle(errIdle) })
			defer r.idle.Stop()
		}
		r.callCtx = callCtx
	}
	r.handle = tools.NewCall(call.GetCallId(), c.tool.Name, c.args, r.progress)
	r.handle.SessionID = b.req.GetSessionId()
	r.handle.Caller = CallerFrom(r.ctx)
	r.handle.SetSession(b.session(r.ctx))
	r.handle.SetApprover(requestApproval) // a function, not a method value: no allocation

	c.running.Store(r)
	o := r.invoke()
	r.returned.Store(true)
	c.running.Store(nil)
	// The slot goes back before the result is sent: what waits for a slow
	// reader holds memory (the outbox's budget), not a slot another caller
	// could use. An abandoned tool keeps its slot until this point, so
	// tools that ignore cancellation cannot be stacked without limit.
	c.slot.Release(b.e.limits)

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
	if r.b.unary {
		return // a unary call reports no progress; the report still counts as activity
	}
	boundProgress(&p, r.b.e.cfg.MaxResultBytes)
	r.b.emit(progressEvent(r.b.req.GetCalls()[r.i].GetCallId(), r.i, p))
}

// overstayed tells whether the running call r should be abandoned at now
// (monotime.Now): its context ended at least the abandon grace ago, as the
// watchdog's ticks saw it, and its tool has not returned. The first tick
// that sees the context ended starts the grace.
func (r *callRun) overstayed(now int64) bool {
	if r.returned.Load() || r.decided.Load() || r.callCtx.Err() == nil {
		return false
	}
	seen := r.doneSeen.Load()
	if seen == 0 {
		r.doneSeen.Store(now)
		return false
	}
	return time.Duration(now-seen) >= r.b.e.cfg.AbandonGrace
}

// abandon sends the result of a tool that ignored its cancellation and lets
// the batch go on without it.
func (r *callRun) abandon() {
	if !r.decided.CompareAndSwap(false, true) {
		return
	}
	b, cfg, deps := r.b, &r.b.e.cfg, &r.b.e.deps
	b.e.abandoned.Add(1) // its slot stays taken until the tool returns; see run
	b.obsCallAbandoned(r.i)
	deps.Logger.WarnContext(r.ctx, "tool ignored cancellation; abandoned", "grace", cfg.AbandonGrace)
	r.decide(outcome{}, true)
	if r.onAbandon != nil {
		r.onAbandon()
	} else {
		// The goroutine that ran the call is stuck in its tool: the lanes
		// after this one go on on a new one.
		b.e.runners.Go(func() { b.runFrom(b.runCtx, r.lane+1) })
	}
}

// decide makes the call's result from the tool's outcome and finishes the
// call with it.
func (r *callRun) decide(o outcome, abandoned bool) {
	r.handle.Close() // no progress event may follow the result
	res := r.b.newTimedResult(r.i, 0)
	r.judge(o, abandoned, res)
	setDuration(res.Duration, time.Since(r.start))
	r.b.finish(r.i, res)
}

// invoke calls the tool's handler, turning a panic into an error: the model
// gets the message, the log gets the stack.
func (r *callRun) invoke() (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			// A panic's value may quote whatever the tool held (its
			// arguments, an upstream's answer): cut, in the log and the
			// message alike.
			v := logcut.String(fmt.Sprint(p))
			r.b.e.deps.Logger.ErrorContext(r.callCtx, "tool panicked", "panic", v, "stack", string(debug.Stack()))
			o = outcome{err: fmt.Errorf("the tool failed unexpectedly (panic: %s)", v)}
		}
	}()
	res, err := r.b.calls[r.i].tool.Handler(r.callCtx, r.handle)
	return outcome{res: res, err: err}
}

// judge fills res from the tool's outcome.
func (r *callRun) judge(o outcome, abandoned bool, res *toolwirev1.CallResult) {
	cfg, deps := &r.b.e.cfg, &r.b.e.deps
	t := r.b.calls[r.i].tool
	failed := o.err != nil || o.res == nil || o.res.IsError
	if r.callCtx.Err() != nil && (abandoned || failed) {
		// Cancellation outranks whatever the tool said about it.
		var kind toolwirev1.ErrorKind
		var msg string
		switch cause := context.Cause(r.callCtx); {
		case r.ctx.Err() != nil && !ownCause(cause):
			kind, msg = cancelled(r.ctx)
		case errors.Is(cause, errIdle):
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, fmt.Sprintf("timed out: no progress for %s", cfg.IdleTimeout)
		case r.rpcLimit:
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, "timed out: the client's deadline was reached"
		default:
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, fmt.Sprintf("timed out after %s", r.timeout)
		}
		if abandoned {
			msg += fmt.Sprintf("; the tool did not stop within %s and was abandoned", cfg.AbandonGrace)
		}
		if kind == toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT && !t.Annotations.ReadOnly && !t.Annotations.Idempotent {
			// A model told only that the call timed out sends it again,
			// and what it changes could change twice.
			msg += "; it was running, so it may have done some or all of what it was asked: check before calling it again"
		}
		errorResult(res, kind, msg)
		return
	}
	if refused, ok := o.err.(*refusedError); ok {
		// The tool asked for approval, was refused, and gave up: the
		// result says why (DENIED with the approver's message, or TIMEOUT).
		errorResult(res, refused.kind, refused.text)
		return
	}
	if o.err != nil {
		o.res = &tools.Result{Content: []tools.Content{{Text: o.err.Error()}}, IsError: true}
	}
	if o.res == nil {
		return // a tool that returns nothing succeeded with nothing to say
	}
	// Structured content past MaxResultBytes is left out by shape
	// whatever it holds: it is not checked, which would build a tree of
	// all of it (10 MB of numbers, 420 MB) for nothing the caller sees.
	if n := len(o.res.StructuredContent); n > 0 && n <= cfg.MaxResultBytes && !o.res.IsError {
		if err := t.ValidateOutput(o.res.StructuredContent); err != nil && t.Upstream() {
			// Another system's answer: delivered as it came, the mismatch
			// in its details (tools.Tool.Upstream says why).
			deps.Logger.WarnContext(r.ctx, "upstream result does not match the tool's output schema", "error", err)
			o.res = tools.NoteOutputMismatch(o.res, err)
		} else if err != nil {
			deps.Logger.ErrorContext(r.ctx, "tool returned invalid structured content", "error", err)
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

// timeout is how long a call may run: the earliest of its own timeout, the
// tool's limit and the engine's limit; the caller's deadline is applied
// too.
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

// deadline is when call i, started at start, must end: its timeout from
// start, or the caller's deadline less DeadlineMargin when that comes first
// (callerLimit), so its result can still be sent. Waiting for a slot or for
// the same call elsewhere is bounded by it too.
func (b *batch) deadline(i int, start time.Time) (deadline time.Time, timeout time.Duration, callerLimit bool) {
	timeout = b.timeout(b.req.GetCalls()[i], b.calls[i].tool)
	deadline = start.Add(timeout)
	if dl, ok := b.callerCtx.Deadline(); ok && dl.Add(-b.e.cfg.DeadlineMargin).Before(deadline) {
		return dl.Add(-b.e.cfg.DeadlineMargin), timeout, true
	}
	return deadline, timeout, false
}

func progressEvent(callID string, i int, p tools.Progress) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{
		CallId: callID, Index: uint32(i), Progress: p.Progress, Total: p.Total, Message: mendUTF8(p.Message), Output: mendUTF8(p.Output),
	}}}
}
