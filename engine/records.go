package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store"
)

// Deadlines of the store operations the engine makes, each suited to what
// waits for it. A shared store that keeps failing to answer is not asked
// at all for a short cool-down (store/redis's breaker), so most of these
// are reached once per outage, not once per call.
const (
	// claimTimeout bounds one attempt to claim an idempotency key.
	claimTimeout = time.Second
	// claimPatience is how long a keyed call goes on trying to claim its
	// key while the store fails, before it ends not run: a short outage
	// costs a short wait, a long one a clear error, never a run without
	// its record.
	claimPatience = 2 * time.Second
	// settleTimeout bounds the attempt to record a result before it is
	// sent; a record that does not land in it is held (heldRecords).
	settleTimeout = time.Second
	// sessionTimeout bounds a session variable's read or write, so that a
	// tool asking for one under a hung store gets an error, not a hang.
	sessionTimeout = time.Second
	// appendTimeout bounds one write to a detached batch's log; an event
	// that does not land in it is buffered (see batchLog).
	appendTimeout = time.Second
)

// Bounds of the records held while the store does not answer.
const (
	maxHeldRecords     = 10_000
	maxHeldRecordBytes = 64 << 20
)

// errRecordLost: the record cannot be kept: another owner holds the key.
var errRecordLost = errors.New("another replica has taken the call's idempotency key over")

// heldRecords are results of keyed calls that ended while the store did not
// answer: their records, kept in memory (bounded) and written as soon as
// the store answers, by one goroutine that runs while there are some. A
// resend of the same call on this replica meanwhile replays the held
// record (see idempotent).
type heldRecords struct {
	e *Engine

	mu      sync.Mutex
	recs    map[string]*heldRecord // by scoped key
	bytes   int
	running bool          // flush is running
	closed  chan struct{} // closed by close: flush makes a last attempt and returns
	done    chan struct{} // closed when a running flush returns
}

type heldRecord struct {
	key, fp, owner string
	stored         []byte // the result as recorded
	at             time.Time
}

func (h *heldRecords) init(e *Engine) {
	h.e = e
	h.recs = make(map[string]*heldRecord)
	h.closed = make(chan struct{})
}

// hold keeps r until it is written; false when the bounds are reached.
func (h *heldRecords) hold(r *heldRecord) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.closed:
		return false
	default:
	}
	old := h.recs[r.key]
	n := len(r.stored)
	if old != nil {
		n -= len(old.stored)
	}
	if old == nil && len(h.recs) >= maxHeldRecords || h.bytes+n > maxHeldRecordBytes {
		return false
	}
	h.recs[r.key] = r
	h.bytes += n
	if !h.running {
		h.running = true
		h.done = make(chan struct{})
		go h.flush(h.done)
	}
	return true
}

// get returns the record held for key.
func (h *heldRecords) get(key string) (*heldRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.recs[key]
	return r, ok
}

// drop forgets r, unless a newer record replaced it.
func (h *heldRecords) drop(r *heldRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.recs[r.key] == r {
		delete(h.recs, r.key)
		h.bytes -= len(r.stored)
	}
}

// Len is how many records are held.
func (h *heldRecords) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}

// flush writes the held records, backing off while the store does not
// answer, until none is left or close.
func (h *heldRecords) flush(done chan struct{}) {
	defer close(done)
	const minBackoff, maxBackoff = 50 * time.Millisecond, time.Second
	backoff := minBackoff
	t := time.NewTimer(0)
	defer t.Stop()
	last := false
	for {
		select {
		case <-t.C:
		case <-h.closed:
			last = true // one more attempt for each, then what is left is lost
		}
		h.mu.Lock()
		recs := make([]*heldRecord, 0, len(h.recs))
		for _, r := range h.recs {
			recs = append(recs, r)
		}
		h.mu.Unlock()
		failed := false
		for _, r := range recs {
			if time.Since(r.at) > h.e.cfg.IdempotencyTTL {
				h.drop(r) // past its TTL it would replay nothing
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
			err := h.e.record(ctx, r)
			cancel()
			switch {
			case err == nil:
				h.drop(r)
			case errors.Is(err, errRecordLost):
				h.e.deps.Logger.Error("a held idempotency record could not be written: its key was taken over; a retry may run the call again",
					"key", r.key, "error", err)
				h.drop(r)
			default:
				failed = true
			}
			if failed {
				break // the store does not answer: wait before the rest
			}
		}
		h.mu.Lock()
		if len(h.recs) == 0 || last {
			if n := len(h.recs); n > 0 {
				h.e.deps.Logger.Error("idempotency records lost at shutdown: the store did not answer; retries of these calls may run them again", "records", n)
			}
			h.running = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		if failed {
			backoff = min(2*backoff, maxBackoff)
		} else {
			backoff = minBackoff
		}
		t.Reset(backoff)
	}
}

// close makes a running flush try each record once more and return, and
// waits for it.
func (h *heldRecords) close() {
	h.mu.Lock()
	select {
	case <-h.closed:
	default:
		close(h.closed)
	}
	done := h.done
	running := h.running
	h.mu.Unlock()
	if running {
		<-done
	}
}

// record writes r to the store: its owner's Complete, or, when the claim
// is no longer the owner's as the store sees it (it ran out and the store
// forgot it, or a restart lost it), a new claim under the same owner and
// then Complete. A record already there with the same arguments counts as
// written (an earlier attempt landed though its answer was lost);
// errRecordLost when another owner holds the key.
func (e *Engine) record(ctx context.Context, r *heldRecord) error {
	st := e.deps.Idempotency
	err := st.Complete(ctx, r.key, r.owner, r.stored, e.cfg.IdempotencyTTL)
	if !errors.Is(err, store.ErrLeaseLost) {
		return err
	}
	got, err := st.Claim(ctx, r.key, r.fp, r.owner, e.cfg.IdempotencyLease, e.cfg.IdempotencyTTL)
	if err != nil {
		return err
	}
	switch got.State {
	case store.Completed:
		return nil
	case store.Claimed:
		err := st.Complete(ctx, r.key, r.owner, r.stored, e.cfg.IdempotencyTTL)
		if errors.Is(err, store.ErrLeaseLost) {
			return errRecordLost
		}
		return err
	}
	return errRecordLost
}

// noteNotRecorded says on res, in its details under "idempotency", that
// its record is not in the store: held (written as soon as the store
// answers) or lost, with why. Clients show details as they come.
func noteNotRecorded(res *toolwirev1.CallResult, held bool, why string) {
	det := map[string]json.RawMessage{}
	if d := res.GetDetails(); d != "" && json.Unmarshal([]byte(d), &det) != nil {
		text, _ := json.Marshal(d)
		det = map[string]json.RawMessage{"details": text}
	}
	note := "not recorded; a retry may run again: " + why
	if held {
		note = "not recorded yet: " + why + "; this replica holds the record and writes it as soon as the store answers, and replays it to a retry sent here meanwhile; if this replica stops first, a retry may run the call again"
	}
	det["idempotency"], _ = json.Marshal(struct {
		Recorded bool   `json:"recorded"`
		Held     bool   `json:"held"`
		Note     string `json:"note"`
	}{false, held, note})
	b, _ := json.Marshal(det)
	res.Details = string(b)
}
