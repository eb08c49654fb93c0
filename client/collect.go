package client

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// Batch is a finished batch: its plan, its results in batch order and its
// summary.
type Batch struct {
	// Accepted is the batch's first event: its ID and lane plan.
	Accepted *toolwirev1.BatchAccepted
	// Results holds one result per call, in the order of the request's calls
	// (by CallResult.index), not in the order they completed.
	Results []*toolwirev1.CallResult
	// Finished is the batch's last event: counts and duration.
	Finished *toolwirev1.BatchFinished
}

// Collect reads a batch's events (from Client.ExecuteBatch) to the end and
// returns its results in batch order. Progress events are dropped; to show
// them, wrap the sequence or range over it directly.
//
// Collect returns an error when the sequence yields one, when the stream
// ends without BatchAccepted or BatchFinished, or when a call has no result
// or a result does not fit the plan: a call the plan does not list, an
// index other than its call's position in the plan, a second result. The
// Batch is returned even then, holding what arrived (with nil for missing
// results), so a runtime can tell which calls did run. Collect knows the
// calls only from the server's plan; CollectFor checks the plan against
// the request too.
func Collect(seq iter.Seq2[*toolwirev1.ExecuteBatchResponse, error]) (*Batch, error) {
	return collect(seq, nil)
}

// CollectFor is Collect for the batch req was sent as: it also returns an
// error, as soon as BatchAccepted arrives, when the plan does not list
// req's calls in req's order (a call left out, one req does not have), and
// Batch.Results has one entry for each of req's calls. Returning early
// ends the loop over seq, which cancels the batch unless it is detached.
func CollectFor(req *toolwirev1.ExecuteBatchRequest, seq iter.Seq2[*toolwirev1.ExecuteBatchResponse, error]) (*Batch, error) {
	sent := make([]string, len(req.GetCalls()))
	for i, c := range req.GetCalls() {
		sent[i] = c.GetCallId()
	}
	return collect(seq, sent)
}

// collect is Collect, checking the plan against the call IDs sent unless
// sent is nil.
func collect(seq iter.Seq2[*toolwirev1.ExecuteBatchResponse, error], sent []string) (*Batch, error) {
	b := &Batch{}
	var planned []string    // call IDs in batch order, as the plan lists them
	pos := map[string]int{} // call ID → its position in planned
	for ev, err := range seq {
		if err != nil {
			return b, err
		}
		switch e := ev.GetEvent().(type) {
		case *toolwirev1.ExecuteBatchResponse_Accepted:
			if b.Accepted != nil {
				return b, errors.New("toolwire: second BatchAccepted")
			}
			b.Accepted = e.Accepted
			for _, l := range e.Accepted.GetLanes() {
				for _, id := range l.GetCallIds() {
					if _, ok := pos[id]; ok {
						return b, fmt.Errorf("toolwire: the plan lists call %q twice", id)
					}
					pos[id] = len(planned)
					planned = append(planned, id)
				}
			}
			if sent == nil {
				b.Results = make([]*toolwirev1.CallResult, len(planned))
				break
			}
			b.Results = make([]*toolwirev1.CallResult, len(sent))
			if err := samePlan(sent, planned, pos); err != nil {
				return b, err
			}
		case *toolwirev1.ExecuteBatchResponse_Result:
			r := e.Result
			i, ok := pos[r.GetCallId()]
			switch {
			case b.Accepted == nil:
				return b, errors.New("toolwire: result before BatchAccepted")
			case !ok:
				return b, fmt.Errorf("toolwire: result for call %q, which is not in the plan", r.GetCallId())
			case int(r.GetIndex()) != i:
				return b, fmt.Errorf("toolwire: result for call %q has index %d; its position in the plan is %d", r.GetCallId(), r.GetIndex(), i)
			case b.Results[i] != nil:
				return b, fmt.Errorf("toolwire: second result for call %q", r.GetCallId())
			}
			b.Results[i] = r
		case *toolwirev1.ExecuteBatchResponse_Finished:
			b.Finished = e.Finished
		}
	}
	if b.Accepted == nil {
		return b, errors.New("toolwire: stream ended without BatchAccepted")
	}
	ids := planned
	if sent != nil {
		ids = sent
	}
	var missing []string
	for i, r := range b.Results {
		if r == nil {
			missing = append(missing, ids[i])
		}
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("toolwire: stream ended without results for calls %s", listed(missing))
	}
	if b.Finished == nil {
		return b, errors.New("toolwire: stream ended without BatchFinished")
	}
	return b, nil
}

// samePlan returns an error saying how planned, the call IDs of a plan in
// batch order at the positions pos gives, differs from sent, those of the
// request.
func samePlan(sent, planned []string, pos map[string]int) error {
	if slices.Equal(sent, planned) {
		return nil
	}
	var left, added []string
	inSent := make(map[string]bool, len(sent))
	for _, id := range sent {
		inSent[id] = true
		if _, ok := pos[id]; !ok {
			left = append(left, id)
		}
	}
	for _, id := range planned {
		if !inSent[id] {
			added = append(added, id)
		}
	}
	switch {
	case len(left) > 0:
		return fmt.Errorf("toolwire: the plan leaves out calls %q of the request", left)
	case len(added) > 0:
		return fmt.Errorf("toolwire: the plan lists calls %q the request does not have", added)
	}
	return fmt.Errorf("toolwire: the plan lists the calls as %q; the request as %q", planned, sent)
}

// maxListed is how many call IDs an error names; a plan is the server's,
// and one of a million calls would make a message of megabytes.
const maxListed = 20

// listed is ids quoted, the first maxListed of them and how many more.
func listed(ids []string) string {
	if len(ids) <= maxListed {
		return fmt.Sprintf("%q", ids)
	}
	return fmt.Sprintf("%q and %d more", ids[:maxListed], len(ids)-maxListed)
}

// Text returns the text blocks of a result joined by newlines; image blocks
// are left out.
func Text(r *toolwirev1.CallResult) string {
	var texts []string
	for _, c := range r.GetContent() {
		if t, ok := c.GetBlock().(*toolwirev1.Content_Text); ok {
			texts = append(texts, t.Text.GetText())
		}
	}
	return strings.Join(texts, "\n")
}
