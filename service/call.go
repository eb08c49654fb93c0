package service

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/types/known/durationpb"
)

// outcome is what a tool's handler returned.
type outcome struct {
	res      *tools.Result
	err      error
	panicked bool
}

// startCall takes call i through validation, runs it under its deadline and
// sends its result. It returns when the result has been handed to the writer.
func (b *batch) startCall(ctx context.Context, lane, i int) {
	call := b.req.GetCalls()[i]
	if ctx.Err() != nil {
		kind, msg := cancelled(ctx)
		b.finishUnstarted(i, kind, msg+" before the call started; nothing was run")
		return
	}
	t := b.tools[i]
	if t == nil {
		b.finishUnstarted(i, toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL, b.unknownTool(call))
		return
	}
	args, err := t.ValidateArguments(call.GetArguments())
	if err != nil {
		b.finishUnstarted(i, toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS,
			fmt.Sprintf("invalid arguments for %q: %v", t.Name, err))
		return
	}

	start := time.Now()
	b.emit(&toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Started{
		Started: &toolwirev1.CallStarted{CallId: call.GetCallId(), Index: uint32(i), Lane: uint32(lane)}}})
	res := b.newResult(i)
	b.execute(ctx, i, t, args, start, res)
	res.Duration = durationpb.New(time.Since(start))
	b.finish(i, res)
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

// execute runs the tool and fills res. A tool that outlives its context by
// more than the abandon grace is left behind: its result is decided without it.
func (b *batch) execute(ctx context.Context, i int, t *tools.Tool, args []byte, start time.Time, res *toolwirev1.CallResult) {
	call := b.req.GetCalls()[i]
	cfg := &b.s.cfg
	timeout := b.timeout(call, t)
	deadline := start.Add(timeout)
	rpcDeadline := false
	if dl, ok := b.streamCtx.Deadline(); ok && dl.Add(-cfg.DeadlineMargin).Before(deadline) {
		deadline, rpcDeadline = dl.Add(-cfg.DeadlineMargin), true
	}
	deadlineCtx, cancelDeadline := context.WithDeadline(ctx, deadline)
	defer cancelDeadline()
	callCtx, cancel := context.WithCancelCause(deadlineCtx)
	defer cancel(nil)

	idle := cfg.IdleTimeout
	var idleTimer *time.Timer
	if idle > 0 {
		idleTimer = time.AfterFunc(idle, func() { cancel(errIdle) })
		defer idleTimer.Stop()
	}
	handle := tools.NewCall(call.GetCallId(), t.Name, args, func(p tools.Progress) {
		if idleTimer != nil {
			idleTimer.Reset(idle)
		}
		b.emit(progressEvent(call.GetCallId(), i, p))
	})
	handle.SessionID = b.req.GetSessionId()

	done := make(chan outcome, 1) // buffered: an abandoned tool must not block on it
	go func() {
		defer func() {
			if r := recover(); r != nil {
				cfg.Logger.Error("tool panicked", "batch_id", b.id, "call_id", call.GetCallId(), "tool", t.Name,
					"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				done <- outcome{err: fmt.Errorf("the tool failed unexpectedly (panic: %v)", r), panicked: true}
			}
		}()
		r, err := t.Handler(callCtx, handle)
		done <- outcome{res: r, err: err}
	}()

	var o outcome
	abandoned := false
	select {
	case o = <-done:
	case <-callCtx.Done():
		grace := time.NewTimer(cfg.AbandonGrace)
		select {
		case o = <-done:
			grace.Stop()
		case <-grace.C:
			abandoned = true
			b.s.abandoned.Add(1)
			cfg.Logger.Warn("tool ignored cancellation; abandoned", "batch_id", b.id, "call_id", call.GetCallId(),
				"tool", t.Name, "grace", cfg.AbandonGrace)
		}
	}
	handle.Close()

	failed := o.err != nil || o.res == nil || o.res.IsError
	if callCtx.Err() != nil && (abandoned || failed) {
		// Cancellation outranks whatever the tool said about it.
		var kind toolwirev1.ErrorKind
		var msg string
		switch cause := context.Cause(callCtx); {
		case ctx.Err() != nil:
			kind, msg = cancelled(ctx)
		case errors.Is(cause, errIdle):
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, fmt.Sprintf("timed out: no progress for %s", idle)
		case rpcDeadline:
			kind, msg = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, fmt.Sprintf("timed out after %s: the client's deadline was reached", time.Since(start).Round(time.Millisecond))
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
	if o.res != nil { // a tool that returns nothing succeeded with nothing to say
		if len(o.res.StructuredContent) > 0 && !o.res.IsError {
			if err := t.ValidateOutput(o.res.StructuredContent); err != nil {
				cfg.Logger.Error("tool returned invalid structured content", "tool", t.Name, "call_id", call.GetCallId(), "error", err)
				errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR, fmt.Sprintf("the tool returned output that does not match its declared output schema: %v", err))
				return
			}
		}
		shape(o.res, cfg.MaxResultBytes, res)
		if res.IsError {
			res.ErrorKind = toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR
		}
	}
}

func progressEvent(callID string, i int, p tools.Progress) *toolwirev1.ExecuteBatchResponse {
	return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{
		CallId: callID, Index: uint32(i), Progress: p.Progress, Total: p.Total, Message: p.Message, Output: p.Output,
	}}}
}
