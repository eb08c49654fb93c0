package engine

import (
	"context"
	"slices"
	"strings"
	"time"
)

// InFlight is one running batch, as Engine.Batches reports it: what an
// operator's view lists, nothing of the calls' arguments or results.
type InFlight struct {
	ID        string         // the batch's ID (BatchAccepted.batch_id)
	Caller    string         // its caller's ID (CallerFrom); "" for the anonymous caller
	SessionID string         // the request's session_id; "" without one
	Calls     int            // calls in the batch
	Running   int            // calls whose tools are running now
	Active    []CallInFlight // those calls, in batch order
	Started   time.Time      // when the batch was admitted
	Detached  bool           // the batch outlives its stream (BatchOptions.detach)
}

// CallInFlight is one call whose tool is running now.
type CallInFlight struct {
	ID      string    // its call_id
	Tool    string    // the tool's name, as the call named it
	Index   int       // its index in the batch
	Started time.Time // when its tool started
}

// Age is how long the batch has been running at now.
func (f InFlight) Age(now time.Time) time.Duration { return now.Sub(f.Started) }

// Batches returns the batches running now, oldest first, at most limit of
// them (limit <= 0: all), and how many there are: every caller's when all
// is true, otherwise only those of ctx's caller (CallerFrom). Unary
// batches (Engine.Call's) are included, though no one was told their ID.
// It holds the engine's lock only to pick the batches, by the caller each
// was admitted with, so that a view of many batches does not keep others
// from being admitted or ending; it reads what the batches publish safely
// and takes no batch's lock.
func (e *Engine) Batches(ctx context.Context, all bool, limit int) ([]InFlight, int) {
	caller := CallerFrom(ctx)
	picked := e.running(func(b *batch) bool { return all || b.caller == caller })
	// Ordered by what is copied out, not through the batches themselves.
	slices.SortFunc(picked, func(a, b pick) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return strings.Compare(a.b.id, b.b.id)
	})
	total := len(picked)
	if limit > 0 && total > limit {
		picked = picked[:limit]
	}
	out := make([]InFlight, 0, len(picked))
	for _, p := range picked {
		b := p.b
		f := InFlight{ID: b.id, Caller: b.caller, SessionID: b.req.GetSessionId(), Calls: len(b.calls), Started: b.start, Detached: b.detached}
		for i := range b.calls {
			// A callRun is complete when it is stored (its start among
			// what it holds), and the request never changes.
			if r := b.calls[i].running.Load(); r != nil {
				f.Running++
				c := b.req.GetCalls()[i]
				f.Active = append(f.Active, CallInFlight{ID: c.GetCallId(), Tool: c.GetName(), Index: i, Started: r.start})
			}
		}
		out = append(out, f)
	}
	return out, total
}

// pick is a running batch, with when it started.
type pick struct {
	start time.Time
	b     *batch
}

// running returns the running batches keep keeps. It holds the engine's
// lock, which admitting and ending batches take, only to copy them out:
// what is asked of them after is asked without it.
func (e *Engine) running(keep func(*batch) bool) []pick {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]pick, 0, len(e.batches))
	for _, b := range e.batches {
		if keep(b) {
			out = append(out, pick{b.start, b})
		}
	}
	return out
}
