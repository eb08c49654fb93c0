package engine

import (
	"context"
	"sync/atomic"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// ScopeName is the instrumentation scope of toolwire's spans and metrics.
// It still names the package they came from before the engine moved out
// of service/: dashboards and alerts select on it, so it stays.
const ScopeName = "github.com/toolwire/toolwire/service/grpcserve"

// Observer watches an engine's batches and calls, in the manner of
// grpc-go's stats.Handler: OpenTelemetry (package engine/otelobserver),
// the debug call log (calllog.go, which New adds when the logger writes
// debug lines) and the audit trail (package audit) are
// each one, and Observers makes one of many. An Observer keeps its
// per-batch and per-call state in the contexts its Start methods return,
// which the engine hands back to the later methods of the same batch or
// call; the engine keeps nothing of it. Deps.Observer nil observes
// nothing, at no cost per batch.
//
// The engine calls, for each batch, BatchStarted once it is admitted,
// LaneStarted as each lane begins, StreamEnded if the send watchdog ends
// its stream, and BatchEnded when Run returns; for each call, CallStarted
// as it enters its path (or, for a call that never did, such as one
// skipped by stop_on_error, just before it ends), CallRunning before its
// tool is invoked, CallAbandoned if the tool outstays its cancellation,
// and CallEnded with its result, exactly once. Methods may be called from
// several goroutines at once, for different calls; they must not block.
// The infos are the engine's and valid only during the call: copy what is
// kept.
type Observer interface {
	BatchStarted(ctx context.Context, b *BatchInfo) context.Context
	LaneStarted(ctx context.Context, b *BatchInfo, lane int)
	StreamEnded(ctx context.Context, b *BatchInfo, reason string)
	// BatchEnded: err is what Run returns; counts are its calls' outcomes.
	BatchEnded(ctx context.Context, b *BatchInfo, counts BatchCounts, err error)
	CallStarted(ctx context.Context, c *CallInfo) context.Context
	CallRunning(ctx context.Context, c *CallInfo)
	CallAbandoned(ctx context.Context, c *CallInfo)
	CallEnded(ctx context.Context, c *CallInfo, res *toolwirev1.CallResult)
}

// CallRecorder is an Observer that must record a call before the call
// runs, or have it refused: an audit trail with audit_required, in the
// manner of HashiCorp Vault's audit devices (a request no device can log
// is not served) and Kubernetes' RequestReceived stage. The engine asks
// RecordCall once per call, after the Admission allowed it (a held call:
// once approved) and before it takes an idempotency key or a slot, so a
// refused call holds neither. A non-nil error ends the call NOT_PERMITTED,
// not run, with the error's text in its result, for the model. Unlike the
// Observer's other methods RecordCall may block until the record is kept,
// bounded by ctx and by a bound of its own; an Observer that records
// nothing before a call should not implement it, and costs nothing then.
type CallRecorder interface {
	RecordCall(ctx context.Context, c *CallInfo) error
}

// EngineObserver is an Observer that wants to know of the engine itself,
// once, when New makes it (a gauge of what it buffers).
type EngineObserver interface {
	EngineStarted(e EngineInfo)
}

// EngineInfo is what an EngineObserver learns of an engine.
type EngineInfo struct {
	// Buffered reads the bytes of events waiting for slow readers, all
	// streams together.
	Buffered func() int64
}

// BatchInfo describes a batch to Observers.
type BatchInfo struct {
	ID       string
	Request  *toolwirev1.ExecuteBatchRequest
	Revision string    // the registry revision it runs against
	Lanes    []Lane    // its lane plan
	Parallel int       // the most calls of a lane that run at once
	Start    time.Time // when it was made, before admission
	Caller   *Identity
	Detached bool // it outlives its stream

	b *batch // for the engine's own observers (the debug call log)
}

// CallInfo describes a call to Observers.
type CallInfo struct {
	Batch *BatchInfo
	Index int // in the batch's request
	Lane  int // the lane that holds it
	Call  *toolwirev1.ToolCall
	Tool  *tools.Tool // nil when the name is unknown or not permitted

	approval *atomic.Pointer[Approval] // the call's; see Approval
}

// Approval is a person's decision on a call held for approval
// (ResolveApproval), as Observers see it: an audit trail names who let a
// call run, or refused it.
type Approval struct {
	Approved bool
	Approver string // who decided, as the decision named them (ResolveApproval's approver)
	By       string // the authenticated caller who resolved it; "" with authentication off
}

// Approval returns the decision on the call when it was held for approval
// and a person decided; ok is false for a call never held, or one whose
// wait ended unanswered. It may be called from any of the Observer's
// methods; a call its tool held (tools.Call.RequestApproval) has it from
// the decision on.
func (c *CallInfo) Approval() (a Approval, ok bool) {
	if c.approval == nil {
		return Approval{}, false
	}
	if p := c.approval.Load(); p != nil {
		return *p, true
	}
	return Approval{}, false
}

// BatchCounts are a batch's calls by outcome when it ends.
type BatchCounts struct {
	Succeeded, Failed, Skipped int
	Unanswered                 int // the batch ended before they had a result
}

// Observers returns an Observer that hands every event to each of list in
// order, each method's context threaded through them; nil entries are
// left out. None gives nil (no observer, no cost), one gives itself.
func Observers(list ...Observer) Observer {
	var out multi
	for _, o := range list {
		switch o := o.(type) {
		case nil:
		case multi:
			out = append(out, o...)
		default:
			out = append(out, o)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

// multi is Observers' list. Each Start method threads the context through
// every entry, so each finds its own state in what it returned.
type multi []Observer

func (m multi) BatchStarted(ctx context.Context, b *BatchInfo) context.Context {
	for _, o := range m {
		ctx = o.BatchStarted(ctx, b)
	}
	return ctx
}

func (m multi) LaneStarted(ctx context.Context, b *BatchInfo, lane int) {
	for _, o := range m {
		o.LaneStarted(ctx, b, lane)
	}
}

func (m multi) StreamEnded(ctx context.Context, b *BatchInfo, reason string) {
	for _, o := range m {
		o.StreamEnded(ctx, b, reason)
	}
}

func (m multi) BatchEnded(ctx context.Context, b *BatchInfo, counts BatchCounts, err error) {
	for _, o := range m {
		o.BatchEnded(ctx, b, counts, err)
	}
}

func (m multi) CallStarted(ctx context.Context, c *CallInfo) context.Context {
	for _, o := range m {
		ctx = o.CallStarted(ctx, c)
	}
	return ctx
}

func (m multi) CallRunning(ctx context.Context, c *CallInfo) {
	for _, o := range m {
		o.CallRunning(ctx, c)
	}
}

func (m multi) CallAbandoned(ctx context.Context, c *CallInfo) {
	for _, o := range m {
		o.CallAbandoned(ctx, c)
	}
}

func (m multi) CallEnded(ctx context.Context, c *CallInfo, res *toolwirev1.CallResult) {
	for _, o := range m {
		o.CallEnded(ctx, c, res)
	}
}

// recorderOf returns the CallRecorders among o (one Observer, or
// Observers' list) as one, or nil when there is none.
func recorderOf(o Observer) CallRecorder {
	var rs recorders
	switch o := o.(type) {
	case multi:
		for _, x := range o {
			if r, ok := x.(CallRecorder); ok {
				rs = append(rs, r)
			}
		}
	case CallRecorder:
		return o
	}
	switch len(rs) {
	case 0:
		return nil
	case 1:
		return rs[0]
	}
	return rs
}

// recorders asks each of its CallRecorders in order; the first refusal
// refuses the call.
type recorders []CallRecorder

func (rs recorders) RecordCall(ctx context.Context, c *CallInfo) error {
	for _, r := range rs {
		if err := r.RecordCall(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (m multi) EngineStarted(e EngineInfo) {
	for _, o := range m {
		if eo, ok := o.(EngineObserver); ok {
			eo.EngineStarted(e)
		}
	}
}
