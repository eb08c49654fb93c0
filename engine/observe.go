package engine

import (
	"context"
	"fmt"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// The engine's side of its Observer (observer.go): each method below does
// nothing, at the cost of one comparison, when the engine has none, and
// otherwise fills the batch's or call's info and keeps the context the
// Observer returned for the later events of the same batch or call.

// obsBatchStarted tells the observer the batch was admitted and returns
// the context its lanes and calls run in.
func (b *batch) obsBatchStarted(ctx context.Context) context.Context {
	o := b.e.obs
	if o == nil {
		return ctx
	}
	b.info = &BatchInfo{ID: b.id, Request: b.req, Revision: b.snap.Revision(), Lanes: b.lanes, Parallel: b.parallel,
		Start: b.start, Caller: IdentityFrom(b.callerCtx), Detached: b.detached, b: b}
	p := new(context.Context) // not &ctx, which would put ctx on the heap for every batch
	*p = o.BatchStarted(ctx, b.info)
	b.obsCtx.Store(p)
	return *p
}

// batchCtx is the context BatchStarted returned.
func (b *batch) batchCtx() context.Context {
	if p := b.obsCtx.Load(); p != nil {
		return *p
	}
	return b.callerCtx
}

func (b *batch) obsLane(li int) {
	if o := b.e.obs; o != nil {
		o.LaneStarted(b.batchCtx(), b.info, li)
	}
}

func (b *batch) obsStreamEnded(reason string) {
	if o := b.e.obs; o != nil && b.obsCtx.Load() != nil {
		o.StreamEnded(b.batchCtx(), b.info, reason)
	}
}

// obsBatchEnded tells the observer the batch ended with err, Run's error.
func (b *batch) obsBatchEnded(err error) {
	o := b.e.obs
	if o == nil || b.obsCtx.Load() == nil {
		return
	}
	var n BatchCounts
	for i := range b.calls {
		r := &b.calls[i].ended
		switch {
		case !r.ended:
			n.Unanswered++
		case r.kind == toolwirev1.ErrorKind_ERROR_KIND_SKIPPED:
			n.Skipped++
		case r.isError:
			n.Failed++
		default:
			n.Succeeded++
		}
	}
	o.BatchEnded(b.batchCtx(), b.info, n, err)
}

// obsCallStarted tells the observer call i, of lane, entered its path, and
// returns the context of its path and its tool.
func (b *batch) obsCallStarted(ctx context.Context, lane, i int) context.Context {
	o := b.e.obs
	if o == nil {
		return ctx
	}
	c := &b.calls[i]
	c.info = CallInfo{Batch: b.info, Index: i, Lane: lane, Call: b.req.GetCalls()[i], Tool: c.tool, approval: &c.approval}
	ctx = o.CallStarted(ctx, &c.info)
	c.obsCtx = ctx
	return ctx
}

func (b *batch) obsCallRunning(i int) {
	if o := b.e.obs; o != nil {
		o.CallRunning(b.calls[i].obsCtx, &b.calls[i].info)
	}
}

func (b *batch) obsCallAbandoned(i int) {
	if o := b.e.obs; o != nil {
		o.CallAbandoned(b.calls[i].obsCtx, &b.calls[i].info)
	}
}

// obsCallEnded tells the observer call i ended with res; a call that
// never entered its path (skipped) is started first.
func (b *batch) obsCallEnded(i int, res *toolwirev1.CallResult) {
	o := b.e.obs
	if o == nil {
		return
	}
	c := &b.calls[i]
	if c.obsCtx == nil {
		b.obsCallStarted(b.batchCtx(), laneOf(b, i), i)
	}
	o.CallEnded(c.obsCtx, &c.info, res)
}

// laneOf returns the index of the lane that holds call i.
func laneOf(b *batch, i int) int {
	for li, l := range b.lanes {
		if l.Calls[0] <= i && i <= l.Calls[len(l.Calls)-1] {
			return li
		}
	}
	return -1
}

// recorded has the call recorded before it goes on, when an Observer must
// (a CallRecorder: an audit trail with audit_required); a call it cannot
// record ends NOT_PERMITTED, not run.
func recorded(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	r := b.e.rec
	if r == nil {
		return nil
	}
	err := r.RecordCall(ctx, &b.calls[i].info)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		// Cancellation outranks the refusal it caused.
		kind, msg := cancelled(ctx)
		return b.failure(i, kind, msg+" before the call started; nothing was run")
	}
	return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED, fmt.Sprintf("not permitted: %v. Nothing was run.", err))
}
