package engine

import (
	"context"
	"sort"
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

// Batches returns the batches running now, oldest first: every caller's
// when all is true, otherwise only those of ctx's caller (CallerFrom).
// Unary batches (Engine.Call's) are included, though no one was told their
// ID. It reads what the batches publish safely and takes no batch's lock.
func (e *Engine) Batches(ctx context.Context, all bool) []InFlight {
	caller := CallerFrom(ctx)
	e.mu.Lock()
	out := make([]InFlight, 0, len(e.batches))
	for _, b := range e.batches {
		who := CallerFrom(b.callerCtx)
		if !all && who != caller {
			continue
		}
		f := InFlight{ID: b.id, Caller: who, SessionID: b.req.GetSessionId(), Calls: len(b.calls), Started: b.start, Detached: b.detached}
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
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.Before(out[j].Started)
		}
		return out[i].ID < out[j].ID
	})
	return out
}
