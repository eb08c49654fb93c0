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
// or a result does not fit the plan. The Batch is returned even then, holding
// what arrived (with nil for missing results), so a runtime can tell which
// calls did run.
func Collect(seq iter.Seq2[*toolwirev1.ExecuteBatchResponse, error]) (*Batch, error) {
	b := &Batch{}
	planned := map[string]bool{} // call ID → has a result
	for ev, err := range seq {
		if err != nil {
			return b, err
		}
		switch e := ev.GetEvent().(type) {
		case *toolwirev1.ExecuteBatchResponse_Accepted:
			b.Accepted = e.Accepted
			for _, l := range e.Accepted.GetLanes() {
				for _, id := range l.GetCallIds() {
					planned[id] = false
				}
			}
			b.Results = make([]*toolwirev1.CallResult, len(planned))
		case *toolwirev1.ExecuteBatchResponse_Result:
			r := e.Result
			i := int(r.GetIndex())
			switch {
			case b.Accepted == nil:
				return b, errors.New("toolwire: result before BatchAccepted")
			case i >= len(b.Results):
				return b, fmt.Errorf("toolwire: result for call %q has index %d; the batch has %d calls", r.GetCallId(), i, len(b.Results))
			}
			done, ok := planned[r.GetCallId()]
			switch {
			case !ok:
				return b, fmt.Errorf("toolwire: result for call %q, which is not in the plan", r.GetCallId())
			case done || b.Results[i] != nil:
				return b, fmt.Errorf("toolwire: second result for call %q", r.GetCallId())
			}
			planned[r.GetCallId()] = true
			b.Results[i] = r
		case *toolwirev1.ExecuteBatchResponse_Finished:
			b.Finished = e.Finished
		}
	}
	if b.Accepted == nil {
		return b, errors.New("toolwire: stream ended without BatchAccepted")
	}
	var missing []string
	for id, done := range planned {
		if !done {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return b, fmt.Errorf("toolwire: stream ended without results for calls %q", missing)
	}
	if b.Finished == nil {
		return b, errors.New("toolwire: stream ended without BatchFinished")
	}
	return b, nil
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
