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
	"sync"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// storeTimeout bounds one write to the store made after a call has run, on a
// context detached from the batch's: a cancelled batch must still record or
// release what it claimed.
const storeTimeout = 5 * time.Second

// idemClaim is a running call's hold on its idempotency key: the lease is
// renewed while the tool runs, and settle records the result or releases
// the key.
type idemClaim struct {
	b     *batch
	key   string // scoped by caller and tool
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
	scoped := strconv.Quote(CallerFrom(ctx)) + "/" + strconv.Quote(t.Name) + "/" + key
	fp := fingerprint(args)
	owner := newID() + newID()

	// Waiting for the same call elsewhere is bounded like running it would be.
	deadline, _, _ := b.deadline(i, time.Now())
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	start := time.Now()
	for {
		got, err := deps.Idempotency.Claim(waitCtx, scoped, fp, owner, cfg.IdempotencyLease, cfg.IdempotencyTTL)
		if err == nil && got.State == store.InFlight {
			err = deps.Idempotency.Wait(waitCtx, scoped)
			if err == nil {
				continue
			}
		}
		if err != nil {
			return b.claimFailed(ctx, waitCtx, i, key, time.Since(start), err)
		}
		switch got.State {
		case store.Claimed:
			c := &idemClaim{b: b, key: scoped, owner: owner, stop: make(chan struct{})}
			c.done.Add(1)
			go c.renew()
			b.calls[i].claim = c
			return nil
		case store.Completed:
			return b.replay(i, got.Result)
		default: // store.Conflict
			res := b.newResult(i)
			errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_IDEMPOTENCY_CONFLICT, fmt.Sprintf(
				"idempotency key %q was used before for a %q call with different arguments; nothing was run. Use a new key for new arguments.",
				key, t.Name))
			return res
		}
	}
}

// deriveKey asks the tool for the key of a call sent without one; "" when
// it has none. A panic in the tool's function is the tool's error, not the
// server's crash.
func (b *batch) deriveKey(t *tools.Tool, args json.RawMessage) (key string, err error) {
	defer func() {
		if r := recover(); r != nil {
			b.e.deps.Logger.Error("tool's idempotency key function panicked", "batch_id", b.id, "tool", t.Name,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			key, err = "", fmt.Errorf("the tool failed to derive its idempotency key (panic: %v)", r)
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
			"the idempotency store failed, so the call with key %q was not run: %v", key, err))
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
// A call that timed out or was cancelled is not recorded: its key is
// released, so a retry runs it again rather than replaying the failure.
func (c *idemClaim) settle(res *toolwirev1.CallResult) {
	if c == nil {
		return
	}
	close(c.stop)
	c.done.Wait()
	cfg, deps := &c.b.e.cfg, &c.b.e.deps
	// Detached from the batch: a cancelled batch must still settle its claims.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.b.callerCtx), storeTimeout)
	defer cancel()
	var err error
	switch res.GetErrorKind() {
	case toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, toolwirev1.ErrorKind_ERROR_KIND_CANCELLED:
		err = deps.Idempotency.Release(ctx, c.key, c.owner)
	default:
		// The record holds the result without the call's ID and index.
		id, index := res.CallId, res.Index
		res.CallId, res.Index = "", 0
		var stored []byte
		stored, err = proto.Marshal(res)
		res.CallId, res.Index = id, index
		if err == nil {
			err = deps.Idempotency.Complete(ctx, c.key, c.owner, stored, cfg.IdempotencyTTL)
		}
	}
	if err != nil {
		deps.Logger.Warn("could not settle an idempotency record", "batch_id", c.b.id, "call_id", res.GetCallId(),
			"key", c.key, "error", err)
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
