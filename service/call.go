package service

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
	"google.golang.org/protobuf/types/known/durationpb"
)

// outcome is what a tool's handler returned.
type outcome struct {
	res *tools.Result
	err error
}

// startCall takes call i through validation, runs it under its deadline and
// sends its result. It normally returns true once the result is handed to the
// writer. When the tool outstays its cancellation by the abandon grace, a
// watchdog sends the result and calls onAbandon instead, and startCall
// returns false whenever the tool finally returns: the caller has been
// replaced and must do nothing more for the batch.
func (b *batch) startCall(ctx context.Context, lane, i int, onAbandon func()) bool {
	call := b.req.GetCalls()[i]
	if ctx.Err() != nil {
		kind, msg := cancelled(ctx)
		b.finishUnstarted(i, kind, msg+" before the call started; nothing was run")
		return true
	}
	t := b.tools[i]
	if t == nil {
		b.finishUnstarted(i, toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL, b.unknownTool(call))
		return true
	}
	args, err := t.ValidateArguments(call.GetArguments())
	if err != nil {
		b.finishUnstarted(i, toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS,
			fmt.Sprintf("invalid arguments for %q: %v", t.Name, err))
		return true
	}
	b.emit(&toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Started{
		Started: &toolwirev1.CallStarted{CallId: call.GetCallId(), Index: uint32(i), Lane: uint32(lane)}}})
	return b.execute(ctx, i, t, args, onAbandon)
}

// timeout is how long call i may run: the earliest of its own timeout, the
// tool's limit and the server's limit; the RPC's deadline is applied too.
func (b *batch) timeout(call *toolwirev1.ToolCall, t *tools.Tool) time.Duration {
	d := b.s.cfg.DefaultCallTimeout
	if t.Timeout > 0 {
		d = t.Timeout
	}
	if ct := call.GetTimeout(); ct != nil && ct.AsDuration() > 0 {
		d = ct.AsDuration()
		if t.Timeout > 0 {
			d = min(d, t.Timeout)
		}
	}
	return min(d, b.s.cfg.MaxCallTimeout)
}

// execute runs the tool on the calling goroutine (a goroutine hop per call
// is most of a small call's cost) and sends its result; see startCall.
func (b *batch) execute(ctx context.Context, i int, t *tools.Tool, args []byte, onAbandon func()) bool {
	call := b.req.GetCalls()[i]
	cfg := &b.s.cfg
	start := time.Now()
	timeout := b.timeout(call, t)
	deadline := start.Add(timeout)
	rpcDeadline := false
	if dl, ok := b.streamCtx.Deadline(); ok && dl.Add(-cfg.DeadlineMargin).Before(deadline) {
		deadline, rpcDeadline = dl.Add(-cfg.DeadlineMargin), true
	}
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var idleTimer *time.Timer
	if cfg.IdleTimeout > 0 {
		var cancelIdle context.CancelCauseFunc
		callCtx, cancelIdle = context.WithCancelCause(callCtx)
		defer cancelIdle(nil)
		idleTimer = time.AfterFunc(cfg.IdleTimeout, func() { cancelIdle(errIdle) })
		defer idleTimer.Stop()
	}
	handle := tools.NewCall(call.GetCallId(), t.Name, args, func(p tools.Progress) {
		if idleTimer != nil {
			idleTimer.Reset(cfg.IdleTimeout)
		}
		b.emit(progressEvent(call.GetCallId(), i, p))
	})
	handle.SessionID = b.req.GetSessionId()

	// Whoever sets decided sends the result: this goroutine when the tool
	// returns, or the watchdog when the tool ignores its cancellation.
	var decided atomic.Bool
	decide := func(o outcome, abandoned bool) {
		handle.Close() // no progress event may follow the result
		res := b.newResult(i)
		b.judge(ctx, callCtx, t, timeout, rpcDeadline, o, abandoned, res)
		res.Duration = durationpb.New(time.Since(start))
		b.finish(i, res)
	}
	var mu sync.Mutex
	returned := false
	var grace *time.Timer
	stopWatch := context.AfterFunc(callCtx, func() {
		mu.Lock()
		defer mu.Unlock()
		if returned {
			return
		}
		grace = time.AfterFunc(cfg.AbandonGrace, func() {
			if !decided.CompareAndSwap(false, true) {
				return
			}
			b.s.abandoned.Add(1)
			cfg.Logger.Warn("tool ignored cancellation; abandoned", "batch_id", b.id, "call_id", call.GetCallId(),
				"tool", t.Name, "grace", cfg.AbandonGrace)
			decide(outcome{}, true)
			onAbandon()
		})
	})

	o := b.invoke(callCtx, t, handle)

	mu.Lock()
	returned = true
	if grace != nil {
		grace.Stop()
	}
	mu.Unlock()
	stopWatch()
	if !decided.CompareAndSwap(false, true) {
		return false
	}
	decide(o, false)
	return true
}

// invoke calls the tool's handler, turning a panic into an error: the model
// gets the message, the log gets the stack.
func (b *batch) invoke(ctx context.Context, t *tools.Tool, handle *tools.Call) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			b.s.cfg.Logger.Error("tool panicked", "batch_id", b.id, "call_id", handle.ID, "tool", t.Name,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			o = outcome{err: fmt.Errorf("the tool failed unexpectedly (panic: %v)", r)}
		}
	}()
	res, err := t.Handler(ctx, handle)
	return outcome{res: res, err: err}
}

// judge fills res from the tool's outcome. ctx is the batch's context and
// callCtx the call's.
func (b *batch) judge(ctx, callCtx context.Context, t *tools.Tool, timeout time.Duration, rpcDeadline bool, o outcome, abandoned bool, res *toolwirev1.CallResult) {
	cfg := &b.s.cfg
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
			cfg.Logger.Error("tool returned invalid structured content", "tool", t.Name, "call_id", res.GetCallId(), "error", err)
			errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR,
				fmt.Sprintf("the tool returned output that does not match its declared output schema: %v", err))
			return
		}
	}
	shape(o.res, cfg.MaxResultBytes, res)
	if res.IsError {
		res.ErrorKind = toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR
	}
}

func progressEvent(callID string, i int, p tools.Progress) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{
		CallId: callID, Index: uint32(i), Progress: p.Progress, Total: p.Total, Message: p.Message, Output: p.Output,
	}}}
}
