package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/logcut"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// storeTimeout bounds a write to the store whose caller has no tighter
// deadline of its own (opening a detached batch's log, approvals).
const storeTimeout = 5 * time.Second

// idemClaim is a running call's hold on its idempotency key: the lease is
// renewed while the tool runs, and settle records the result or releases
// the key.
type idemClaim struct {
	b     *batch
	key   string // scoped by caller and tool
	fp    string // the arguments' fingerprint
	owner string
	stop  chan struct{}
	done  sync.WaitGroup
}

// idempotent takes call i's idempotency key, if it has one, before the call
// runs. The key comes before the slot: a replay or a wait for a duplicate
// elsewhere needs no slot. It ends the call with its result replayed from
// the store, joined from a call in flight elsewhere, or an error
// (conflict, timeout while waiting, store failure). Otherwise the call
// goes on holding the claim (callState.claim), which finish settles.
func idempotent(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	call := b.req.GetCalls()[i]
	t, args := b.calls[i].tool, b.calls[i].args
	key := call.GetIdempotencyKey()
	if key == "" && t.IdempotencyKey != nil {
		var err error
		if key, err = b.deriveKey(t, args); err != nil {
			res := b.newResult(i)
			errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR, err.Error()+"; nothing was run")
			return res
		}
	}
	if key == "" {
		return nil
	}
	cfg, deps := &b.e.cfg, &b.e.deps
	scoped := scopedKey(ctx, t, key)
	fp := fingerprint(args)
	owner := newID() + newID()

	// Waiting for the same call elsewhere is bounded like running it would be.
	deadline, _, _ := b.deadline(i, time.Now())
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	start := time.Now()
	var failing time.Time // when the store began failing to answer; zero while it answers
	for {
		if r, ok := b.e.heldRecs.get(scoped); ok {
			// This replica ran the call and holds its record, which the
			// store has not taken yet: the same answer it will give.
			if r.fp != fp {
				return b.conflict(i, key)
			}
			return b.replay(i, r.stored)
		}
		attempt := time.Now()
		actx, acancel := context.WithTimeout(waitCtx, claimTimeout)
		got, err := deps.Idempotency.Claim(actx, scoped, fp, owner, cfg.IdempotencyLease, cfg.IdempotencyTTL)
		acancel()
		if err == nil && got.State == store.InFlight {
			err = deps.Idempotency.Wait(waitCtx, scoped)
			if err == nil {
				failing = time.Time{}
				continue
			}
		}
		if err != nil && ctx.Err() == nil && waitCtx.Err() == nil {
			// The store did not answer: try again for a while, never run
			// the call without its claim.
			if failing.IsZero() {
				failing = attempt
			}
			if time.Since(failing) < claimPatience {
				t := time.NewTimer(100 * time.Millisecond)
				select {
				case <-t.C:
				case <-waitCtx.Done():
					t.Stop()
				}
				continue
			}
		}
		if err != nil {
			return b.claimFailed(ctx, waitCtx, i, key, time.Since(start), err)
		}
		switch got.State {
		case store.Claimed:
			c := &idemClaim{b: b, key: scoped, fp: fp, owner: owner, stop: make(chan struct{})}
			c.done.Add(1)
			go c.renew()
			b.calls[i].claim = c
			return nil
		case store.Completed:
			return b.replay(i, got.Result)
		default: // store.Conflict
			return b.conflict(i, key)
		}
	}
}

// replayRefused returns the recorded result of call i, whose arguments
// its tool's schema refuses, when its idempotency key holds one for the
// same arguments; nil otherwise. The call may have run before a reload
// changed the schema (a tool's new required field, say) and be sent again
// now: refused as invalid, its caller would never get the result of what
// ran, and might make the call again under a new key. Only a completed
// record of the same caller, tool, key and arguments answers; a call with
// them in flight is waited for as idempotent waits. A free key is claimed
// only to be released at once; a store that does not answer leaves the
// refusal as it is. Admission is not asked again: the answer is one the
// caller was given already.
func replayRefused(ctx context.Context, b *batch, i int) *toolwirev1.CallResult {
	key := b.req.GetCalls()[i].GetIdempotencyKey()
	if key == "" {
		return nil // a derived key needs arguments its tool can read
	}
	cfg, deps := &b.e.cfg, &b.e.deps
	scoped := scopedKey(ctx, b.calls[i].tool, key)
	args := strings.TrimSpace(b.req.GetCalls()[i].GetArguments())
	if args == "" {
		args = "{}" // as ValidateArguments reads it
	}
	fp := fingerprint(json.RawMessage(args))
	owner := newID() + newID()
	deadline, _, _ := b.deadline(i, time.Now())
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for waitCtx.Err() == nil {
		if r, ok := b.e.heldRecs.get(scoped); ok {
			if r.fp != fp {
				return nil
			}
			return b.replay(i, r.stored)
		}
		actx, acancel := context.WithTimeout(waitCtx, claimTimeout)
		got, err := deps.Idempotency.Claim(actx, scoped, fp, owner, cfg.IdempotencyLease, cfg.IdempotencyTTL)
		acancel()
		if err != nil {
			return nil
		}
		switch got.State {
		case store.Completed:
			return b.replay(i, got.Result)
		case store.InFlight:
			if deps.Idempotency.Wait(waitCtx, scoped) != nil {
				return nil
			}
		case store.Claimed:
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
			if err := deps.Idempotency.Release(rctx, scoped, owner); err != nil {
				deps.Logger.Warn("could not release an idempotency key looked at for a refused call; a retry waits for its lease to run out",
					"batch_id", b.id, "key", scoped, "error", err)
			}
			rcancel()
			return nil
		default: // store.Conflict: other arguments; the refusal says why
			return nil
		}
	}
	return nil
}

// scopedKey is key as the store keeps it: a caller's keys are its own,
// and each tool's.
func scopedKey(ctx context.Context, t *tools.Tool, key string) string {
	return strconv.Quote(CallerFrom(ctx)) + "/" + strconv.Quote(t.Name) + "/" + key
}

// conflict is the result of call i, whose key was used with other
// arguments.
func (b *batch) conflict(i int, key string) *toolwirev1.CallResult {
	res := b.newResult(i)
	errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_IDEMPOTENCY_CONFLICT, fmt.Sprintf(
		"idempotency key %q was used before for a %q call with different arguments; nothing was run. Use a new key for new arguments.",
		key, b.calls[i].tool.Name))
	return res
}

// deriveKey asks the tool for the key of a call sent without one; "" when
// it has none. A panic in the tool's function is the tool's error, not the
// server's crash.
func (b *batch) deriveKey(t *tools.Tool, args json.RawMessage) (key string, err error) {
	defer func() {
		if r := recover(); r != nil {
			v := logcut.String(fmt.Sprint(r)) // as a tool's panic (call.go)
			b.e.deps.Logger.Error("tool's idempotency key function panicked", "batch_id", b.id, "tool", t.Name,
				"panic", v, "stack", string(debug.Stack()))
			key, err = "", fmt.Errorf("the tool failed to derive its idempotency key (panic: %s)", v)
		}
	}()
	key, ok := t.IdempotencyKey(args)
	if !ok {
		return "", nil
	}
	if len(key) > MaxIDBytes {
		// A key derived from arguments can be as long as they are; its
		// digest keeps it unique and the store's keys short.
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return key, nil
}

// claimFailed is the result of a call whose claim did not end in a
// decision: the batch was cancelled or the call's deadline passed while
// waiting for the same call elsewhere, or the store failed.
func (b *batch) claimFailed(ctx, waitCtx context.Context, i int, key string, waited time.Duration, err error) *toolwirev1.CallResult {
	res := b.newResult(i)
	const elsewhere = " while waiting for the same call (same idempotency key) in flight elsewhere; nothing was run here"
	switch {
	case ctx.Err() != nil:
		kind, msg := cancelled(ctx)
		errorResult(res, kind, msg+elsewhere)
	case waitCtx.Err() != nil:
		errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, fmt.Sprintf(
			"timed out after %s%s. It may still complete: send the call again with the same key to get its result.",
			waited.Round(time.Millisecond), elsewhere))
	default:
		// Running without the store could run the call twice: refuse.
		b.e.deps.Logger.Error("idempotency store failed", "batch_id", b.id, "call_id", res.GetCallId(), "error", err)
		errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_INTERNAL, fmt.Sprintf(
			"the idempotency store failed for %s (it did not answer, or refused the write), so the call with key %q was not run (running it without its record could run it twice); send it again later: %v",
			waited.Round(time.Millisecond), key, err))
	}
	return res
}

// replay is a stored result as call i's.
func (b *batch) replay(i int, stored []byte) *toolwirev1.CallResult {
	res := b.newResult(i)
	// Merge: the stored result has no call ID or index; those are the new call's.
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(stored, res); err != nil {
		errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_INTERNAL,
			fmt.Sprintf("the stored result of this call could not be read: %v; it was not run again", err))
		return res
	}
	res.Replayed = true
	return res
}

// renew keeps the lease alive while the tool runs, so a long call is not
// taken over by a retry on another replica.
func (c *idemClaim) renew() {
	defer c.done.Done()
	cfg, deps := &c.b.e.cfg, &c.b.e.deps
	t := time.NewTicker(cfg.IdempotencyLease / 3)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.IdempotencyLease/3)
		err := deps.Idempotency.Renew(ctx, c.key, c.owner, cfg.IdempotencyLease)
		cancel()
		if err != nil {
			deps.Logger.Warn("could not renew an idempotency lease; a retry elsewhere may run the call again",
				"batch_id", c.b.id, "key", c.key, "error", err)
			if errors.Is(err, store.ErrLeaseLost) {
				return
			}
		}
	}
}

// settle records res as the result of the claimed call, before it is sent.
// A call that timed out, was cancelled, or was denied by a person (its
// tool asked for approval at run time) is not recorded: its key is
// released, so a retry runs it again rather than replaying the failure;
// a denied call's retry asks again, as one an approval rule holds does
// (that one takes no key until approved).
//
// A record the store does not take within settleTimeout is held by the
// engine (heldRecords) and written as soon as the store answers, and res
// says it is not recorded yet; one that can never be written (another
// replica took the key over, or the held records are full) is said on res
// to be not recorded, so its caller knows a retry may run it again.
func (c *idemClaim) settle(res *toolwirev1.CallResult) {
	if c == nil {
		return
	}
	close(c.stop)
	c.done.Wait()
	e, deps := c.b.e, &c.b.e.deps
	switch res.GetErrorKind() {
	case toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, toolwirev1.ErrorKind_ERROR_KIND_DENIED:
		// Detached from the batch: a cancelled batch must still release
		// its claims. One that fails runs out with its lease.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.b.callerCtx), settleTimeout)
		defer cancel()
		if err := deps.Idempotency.Release(ctx, c.key, c.owner); err != nil {
			deps.Logger.Warn("could not release an idempotency key; a retry waits for its lease to run out",
				"batch_id", c.b.id, "call_id", res.GetCallId(), "key", c.key, "error", err)
		}
		return
	}
	// The note on res says a retry may run the call again: it must reach
	// the caller, so it takes its room from the content (a result at
	// MaxResultBytes would otherwise lose its details, the note with
	// them, when finish bounds it).
	note := func(held bool, why string) {
		noteNotRecorded(res, held, why)
		boundKeepingDetails(res, e.cfg.MaxResultBytes)
	}
	// The record holds the result without the call's ID and index.
	id, index := res.CallId, res.Index
	res.CallId, res.Index = "", 0
	stored, err := proto.Marshal(res)
	res.CallId, res.Index = id, index
	if err != nil {
		deps.Logger.Error("could not encode an idempotency record", "batch_id", c.b.id, "call_id", id, "error", err)
		note(false, "its result could not be encoded")
		return
	}
	r := &heldRecord{key: c.key, fp: c.fp, owner: c.owner, stored: stored, at: time.Now()}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.b.callerCtx), settleTimeout)
	defer cancel()
	switch err := e.record(ctx, r); {
	case err == nil:
	case errors.Is(err, errRecordLost):
		deps.Logger.Error("could not record a keyed call's result: its key was taken over; a retry may run it again",
			"batch_id", c.b.id, "call_id", id, "key", c.key)
		note(false, "the call outlived its claim on the key, which another replica took over")
	case e.heldRecs.hold(r):
		deps.Logger.Warn("the store did not take a keyed call's record; holding it until it does",
			"batch_id", c.b.id, "call_id", id, "key", c.key, "error", err)
		note(true, fmt.Sprintf("the idempotency store did not take it (%v)", err))
	default:
		deps.Logger.Error("the store did not take a keyed call's record, and no more can be held; a retry may run it again",
			"batch_id", c.b.id, "call_id", id, "key", c.key, "error", err)
		note(false, fmt.Sprintf("the idempotency store did not take it (%v), and this replica holds as many unwritten records as it may", err))
	}
}

// fingerprint identifies a call's arguments independently of key order and
// whitespace.
func fingerprint(args json.RawMessage) string {
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var v any
	canonical := []byte(args)
	if d.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canonical = b
		}
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}
