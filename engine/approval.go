package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/tools"
)

// Approvals hold calls for a person's decision. Which calls wait is the
// Admission's to say (its verdict Hold: package policy's approval rules
// and require_approval policies), or a running tool's (RequestApproval);
// this file keeps only the waiting. A held call waits after validation and
// before idempotency and limits, so it holds no key and no concurrency
// slot, only its lane; its batch announces it with CallAwaitingApproval.
// Whoever may approve (Config.Approvers; anyone when authentication is
// off) answers with ResolveApproval, on any replica: an approved call goes
// on along its path, a denied one ends DENIED with the approver's message,
// and one nobody answers within ApprovalTimeout (or its own timeout) ends
// TIMEOUT.
//
// The wait is announced in the store (the approval mailbox in Deps.Vars,
// see vars.go), so that a replica other than the batch's can check the
// resolver and hand the decision over; that replica then signals it
// (signals.go), and the waiting call, which watches for it, looks for the
// decision at once; it also looks every fallbackPoll, in case a notice
// was lost (every approvalPoll when nothing notifies it). A decision made
// on its own replica it takes at once.

// approvalPoll is how often a waiting call looks in the store for a
// decision taken on another replica when no notice can tell it.
const approvalPoll = 250 * time.Millisecond

// localDecisionLook bounds ResolveApproval's look, on the held call's own
// replica, for a decision left through another: a stalled store must not
// hold up an approver whose decision this replica can hand over itself.
const localDecisionLook = time.Second

// decision is a person's answer to a held call.
type decision struct {
	Approved bool   `json:"approved"`
	Message  string `json:"message,omitempty"`
	Approver string `json:"approver,omitempty"` // as the request named them
	By       string `json:"by"`                 // the authenticated caller who resolved it
	// Over marks no decision: the call waits no more (approvalMail.clear).
	Over bool `json:"over,omitempty"`
}

// pendingApproval is a held call, as the store announces it.
type pendingApproval struct {
	Caller   string `json:"caller"` // the batch's
	Tool     string `json:"tool"`
	Detached bool   `json:"detached,omitempty"` // its batch has a log, logName(Caller, batch ID)
}

// announceLease is how long a held call's announcement lives unless its
// replica renews it, which it does every third of it while the call
// waits: a replica that dies leaves no announcement a decision could be
// left against longer than this. At least 3 s, so that the waiting
// call's tick (at most a second apart) renews it in time.
func (e *Engine) announceLease() time.Duration { return max(e.cfg.BatchLease, 3*time.Second) }

// approvals are the calls held on this replica, by approvalKey.
type approvals struct {
	mu      sync.Mutex
	waiting map[string]*heldCall
}

type heldCall struct {
	caller  string
	decided chan decision // buffered: the one decision
	over    bool          // under approvals.mu: decided, or waiting no more
}

// resolve hands d to h, unless h was decided already or waits no more:
// false then, and d is dropped. The first decision stands.
func (a *approvals) resolve(h *heldCall, d decision) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h.over {
		return false
	}
	h.over = true
	h.decided <- d
	return true
}

// end marks h as waiting no more, so that no decision is taken for it
// from now on, and returns the one taken before, if any.
func (a *approvals) end(h *heldCall) (decision, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h.over = true
	select {
	case d := <-h.decided:
		return d, true
	default:
		return decision{}, false
	}
}

// awaitApproval holds call i until a decision, its timeout, or the batch's
// end, and returns its result, or nil when approved.
func (b *batch) awaitApproval(ctx context.Context, i int, reason string) *toolwirev1.CallResult {
	e := b.e
	call := b.req.GetCalls()[i]
	caller := CallerFrom(b.callerCtx)
	wait := e.cfg.ApprovalTimeout
	if wait <= 0 {
		deadline, _, _ := b.deadline(i, time.Now())
		wait = time.Until(deadline)
	}
	h := &heldCall{caller: caller, decided: make(chan decision, 1)}
	key := b.id + "/" + call.GetCallId()
	e.held.mu.Lock()
	if e.held.waiting == nil {
		e.held.waiting = make(map[string]*heldCall)
	}
	e.held.waiting[key] = h
	e.held.mu.Unlock()
	defer func() {
		e.held.mu.Lock()
		delete(e.held.waiting, key)
		e.held.mu.Unlock()
	}()
	// Watched before it is announced, so that no decision taken on another
	// replica comes unnoticed.
	woken := make(chan struct{}, 1)
	unwatch, watched := e.watch(approvalTopic(b.id, call.GetCallId()), func() {
		select {
		case woken <- struct{}{}:
		default: // a look is due already
		}
	})
	defer unwatch()
	mail := approvalMail{e.deps.Vars}
	pending := pendingApproval{Caller: caller, Tool: call.GetName(), Detached: b.detached}
	announce := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
		return mail.announce(sctx, b.id, call.GetCallId(), pending, e.announceLease())
	}
	// The first announcement comes after fresh, once; one the store did
	// not take is tried again at every tick, not a third of a lease later
	// (3.3 s by default, while an approval sent to another replica was
	// NotFound). fresh is not run again once it has been: an announcement
	// that failed may yet have landed, and a decision left for it since
	// must stand.
	freshDone, isAnnounced := false, false
	first := func() error {
		if !freshDone {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
			err := mail.fresh(sctx, b.id, call.GetCallId())
			cancel()
			if err != nil {
				return err
			}
			freshDone = true
		}
		if err := announce(); err != nil {
			return err
		}
		isAnnounced = true
		return nil
	}
	if err := first(); err != nil {
		e.deps.Logger.WarnContext(ctx, "could not announce a call waiting for approval in the store; only this replica can resolve it until it is", "error", err)
	}
	announced := time.Now()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
		mail.clear(sctx, b.id, call.GetCallId())
	}()
	// The slot the batch reserved for its first call is given back: a held
	// call holds no slot; it takes one as any call does once approved.
	b.dropReserved()
	// batch_id, call_id and tool come from ctx (LogHandler): given here
	// too, a JSON line would hold each twice.
	e.deps.Logger.InfoContext(ctx, "call waits for approval", "reason", reason)
	if !b.unary {
		b.emit(awaitingEventFor(call, i, reason))
	}

	timer := time.NewTimer(wait)
	defer timer.Stop()
	// A tick looks when a look is due: at once after a look the store did
	// not answer, else after e.poll (the fallback while notices are
	// heard). It comes every approvalPoll while nothing is heard, and
	// every second at most while notices are, so that a store that stops
	// hearing them is polled within a second.
	every := func() time.Duration { return min(e.poll(watched, approvalPoll), time.Second) }
	poll := time.NewTicker(every())
	defer poll.Stop()
	looked, again := time.Now(), false
	var d decision
	for decided := false; !decided; {
		look := false
		select {
		case d = <-h.decided:
			decided = true
		case <-woken:
			look = true
		case now := <-poll.C:
			look = again || now.Sub(looked) >= e.poll(watched, approvalPoll)
			poll.Reset(every())
			switch {
			case !isAnnounced:
				if first() == nil {
					announced = now
					e.deps.Logger.InfoContext(ctx, "call waiting for approval announced in the store")
				}
			case now.Sub(announced) >= e.announceLease()/3:
				// A renewal the store does not take is tried again at
				// the next tick; the announcement lasts a lease.
				if announce() == nil {
					announced = now
				}
			}
		case <-timer.C:
			if d, decided = e.held.end(h); decided {
				break // decided as the time ran out: the approver was told it stands
			}
			return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT,
				fmt.Sprintf("timed out: no one approved the call within %s (%s); nothing was run", wait.Round(time.Millisecond), reason))
		case <-ctx.Done():
			e.held.end(h) // cancellation outranks a decision taken meanwhile
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT,
					fmt.Sprintf("timed out: no one approved the call before its deadline (%s)", reason))
			}
			kind, msg := cancelled(ctx)
			return b.failure(i, kind, msg+" while the call waited for approval; nothing was run")
		}
		if look {
			sctx, cancel := context.WithTimeout(ctx, storeTimeout)
			md, ok, err := mail.decision(sctx, b.id, call.GetCallId())
			cancel()
			// A look the store did not answer is taken again at the next
			// tick, not left to the fallback poll: a wake that came as the
			// store came back (a resubscription) must not be wasted.
			looked, again = time.Now(), err != nil
			if ok {
				// Through h.decided, as a decision taken here is: the
				// first of the two stands, and the next select takes it.
				e.held.resolve(h, md)
			}
		}
	}
	e.deps.Logger.InfoContext(ctx, "approval resolved", "approved", d.Approved, "approver", d.Approver, "by", d.By)
	b.calls[i].approval.Store(&Approval{Approved: d.Approved, Approver: d.Approver, By: d.By})
	if d.Approved {
		return nil
	}
	msg := d.Message
	if msg == "" {
		msg = "denied: a person declined to let this call run; nothing was run"
	}
	return b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_DENIED, msg)
}

// ResolveApproval approves or denies the call callID of batch batchID,
// held for approval, on this replica or another sharing the store. Only a
// caller named in Config.Approvers may resolve, or anyone when
// authentication is off (the anonymous caller): else PermissionDenied. A
// caller may not resolve its own call unless Config.ApproveOwnCalls is set
// (the anonymous caller excepted: without authentication everyone is it):
// PermissionDenied too. NotFound when the call is not waiting, including
// when it was resolved already: the first decision stands.
func (e *Engine) ResolveApproval(ctx context.Context, batchID, callID string, approved bool, message, approver string) error {
	if err := checkID("batch_id", batchID); err != nil {
		return err
	}
	if err := checkID("call_id", callID); err != nil {
		return err
	}
	by := CallerFrom(ctx)
	if by != "" && !slices.Contains(e.cfg.Approvers, by) {
		return errorf(PermissionDenied, "this caller may not resolve approvals (approvers: in the server's configuration)")
	}
	if len(message) > MaxReasonBytes*4 {
		message = cutUTF8(message, MaxReasonBytes*4) + "…"
	}
	if len(approver) > MaxIDBytes {
		approver = cutUTF8(approver, MaxIDBytes)
	}
	d := decision{Approved: approved, Message: message, Approver: approver, By: by}
	own := func(caller string) error {
		if by != "" && by == caller && !e.cfg.ApproveOwnCalls {
			return errorf(PermissionDenied, "a caller may not resolve its own call's approval")
		}
		return nil
	}
	resolved := func() error {
		return errorf(NotFound, "call %s of batch %s waits for approval no more: it was resolved already (the first decision stands), or its wait ended",
			shorten(callID), shorten(batchID))
	}
	mail := approvalMail{e.deps.Vars}
	key := batchID + "/" + callID
	e.held.mu.Lock()
	h := e.held.waiting[key]
	e.held.mu.Unlock()
	if h != nil {
		if err := own(h.caller); err != nil {
			return err
		}
		// The decision goes to the mailbox first, where one left through
		// another replica at the same moment would be: the first there
		// stands, and the other decider is told so. A store that does not
		// answer soon leaves the decision to this replica, which the call
		// takes before any it cannot read.
		lctx, cancel := context.WithTimeout(ctx, localDecisionLook)
		defer cancel()
		added, err := mail.decide(lctx, batchID, callID, d)
		if err == nil && !added {
			// A decision stands, unless what is there is the mark a wait
			// of this call before left, which announcing this one could
			// not clear (the store was out then): the call waits still.
			if _, left, err := mail.decision(lctx, batchID, callID); left || err != nil || mail.replace(lctx, batchID, callID, d) != nil {
				return resolved()
			}
		}
		if !e.held.resolve(h, d) {
			return resolved()
		}
		return nil
	}
	p, ok, err := mail.pending(ctx, batchID, callID)
	if err != nil {
		return storeError(ctx, err)
	}
	if !ok {
		return errorf(NotFound, "no call %s of batch %s waits for approval", shorten(callID), shorten(batchID))
	}
	if err := own(p.Caller); err != nil {
		return err
	}
	// A detached batch's replica may have died within the announcement's
	// lease; once its own lease has run out (or its batch was ended as
	// owner lost) no one takes a decision for it. The log is read for an
	// announcement that does not say its batch is detached too: a version
	// before the flag (met in a rolling upgrade) wrote none, and did not
	// renew its announcement, which outlived its replica by the call's
	// whole wait and a minute. No log is then a plain batch's.
	info, err := e.deps.EventLog.Stat(ctx, logName(p.Caller, batchID))
	switch {
	case errors.Is(err, store.ErrLogNotFound) && !p.Detached:
	case errors.Is(err, store.ErrLogNotFound) || (err == nil && (info.Finished || !info.Owned)):
		return errorf(NotFound, "call %s of batch %s waits for approval no more: its batch has ended, or the replica running it was lost (it ends as owner lost)",
			shorten(callID), shorten(batchID))
	case err != nil:
		return storeError(ctx, err)
	}
	// A decision left already stands, even one left at this moment
	// through another replica: a second would replace it unseen if the
	// call has not looked yet, and both deciders would be told theirs was
	// taken.
	if added, err := mail.decide(ctx, batchID, callID, d); err != nil {
		return storeError(ctx, err)
	} else if !added {
		return resolved()
	}
	e.signal(ctx, approvalTopic(batchID, callID))
	return nil
}

type awaitingEvent struct {
	resp  toolwirev1.ExecuteBatchResponse
	oneof toolwirev1.ExecuteBatchResponse_AwaitingApproval
	msg   toolwirev1.CallAwaitingApproval
}

func awaitingEventFor(call *toolwirev1.ToolCall, i int, reason string) *toolwirev1.ExecuteBatchResponse {
	e := &awaitingEvent{msg: toolwirev1.CallAwaitingApproval{CallId: call.GetCallId(), Index: uint32(i), ToolName: call.GetName(), Arguments: call.GetArguments(), Reason: reason}}
	e.oneof.AwaitingApproval = &e.msg
	e.resp.Event = &e.oneof
	return &e.resp
}

// requestApproval is the tools.Call's RequestApproval: the call is the one
// ctx names (its log scope, which startCall put there). The call's slot is
// given back while it waits and taken again once approved, so a call
// waiting for a person holds no slot; its idle timeout is paused.
func requestApproval(ctx context.Context, reason string) error {
	sc, _ := ctx.Value(logScopeKey{}).(*logScope)
	if sc == nil || sc.i < 0 {
		return tools.ErrNoApprover
	}
	r := sc.b.calls[sc.i].running.Load()
	if r == nil {
		return tools.ErrNoApprover
	}
	b, c := r.b, &r.b.calls[r.i]
	if len(reason) > MaxReasonBytes {
		reason = cutUTF8(reason, MaxReasonBytes) + "…"
	}
	if r.idle != nil {
		r.idle.Stop()
		defer r.idle.Reset(b.e.cfg.IdleTimeout)
	}
	c.slot.Release(b.e.limits)
	if res := b.awaitApproval(ctx, r.i, reason); res != nil {
		return &refusedError{kind: res.GetErrorKind(), text: textOf(res)}
	}
	deadline, _, _ := b.deadline(r.i, time.Now())
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	cs, err := b.e.limits.Acquire(ctx, CallerFrom(b.callerCtx), time.Until(deadline))
	if err != nil {
		return fmt.Errorf("approved, but no slot came free to go on: %w", err)
	}
	c.slot.Hold(cs)
	return nil
}

// refusedError is RequestApproval's error when the call was not approved.
type refusedError struct {
	kind toolwirev1.ErrorKind
	text string
}

func (e *refusedError) Error() string { return e.text }

// textOf is a result's text blocks, joined.
func textOf(res *toolwirev1.CallResult) string {
	var s string
	for _, c := range res.GetContent() {
		s += c.GetText().GetText()
	}
	return s
}
