package main

import (
	"context"
	"fmt"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ChatRequest is the body of the next OpenAI Chat Completions request the
// agent would send: the conversation so far and the tool declarations.
type ChatRequest struct {
	Messages []any               `json:"messages"`
	Tools    []client.OpenAITool `json:"tools"`
}

// Run plays the scenario's conversation against the server behind c, the way
// an agent runtime talks to a model and to toolwire, and returns the chat
// request it built and every mismatch with the scenario's expectations; none
// means the server conforms.
func Run(ctx context.Context, c *client.Client, s *Scenario) (chat *ChatRequest, mismatches []string) {
	chat = &ChatRequest{Messages: []any{map[string]string{"role": "user", "content": s.User}}}
	for i, step := range s.Steps {
		fail := func(format string, args ...any) {
			mismatches = append(mismatches, step.Name+": "+fmt.Sprintf(format, args...))
		}
		switch {
		case step.ListTools != nil:
			list, err := c.ListTools(ctx)
			if err != nil {
				fail("ListTools: %v", err)
				continue
			}
			chat.Tools = client.OpenAITools(list.GetTools())
			checkDeclarations(fail, step.ListTools, list.GetTools(), chat.Tools)

		case step.Assistant != nil:
			if len(step.Assistant.ToolCalls) == 0 {
				chat.Messages = append(chat.Messages, step.Assistant)
				// The model answered in text: the loop ends.
				if rest := len(s.Steps) - i - 1; rest > 0 {
					fail("%d steps follow the model's final answer", rest)
				}
				return chat, mismatches
			}
			calls, err := client.FromOpenAIToolCalls(step.Assistant.ToolCalls)
			if err != nil {
				fail("%v", err)
				continue
			}
			rec := runBatch(ctx, c, calls, step.Cancel)
			if rec.status.Code() == codes.OK {
				// The model's message and an answer to each of its tool
				// calls, in the order of the calls, as the next model
				// request needs. A batch that did not finish (cancelled,
				// refused) leaves the conversation as it was.
				chat.Messages = append(chat.Messages, step.Assistant)
				for _, r := range rec.results {
					chat.Messages = append(chat.Messages, client.OpenAIToolMessage(r))
				}
			}
			for _, m := range rec.problems {
				fail("%s", m)
			}
			if step.Expect != nil {
				checkBatch(fail, step.Expect, rec)
			}

		default:
			fail("neither list_tools nor assistant")
		}
	}
	return chat, append(mismatches, "the scenario ends without the model's final answer")
}

// batchRecord is what one batch's stream showed.
type batchRecord struct {
	calls    []*toolwirev1.ToolCall
	position map[string]int // call ID → index in calls
	letters  []byte         // the events as A, S, P, R, F
	accepted *toolwirev1.BatchAccepted
	finished *toolwirev1.BatchFinished
	perCall  map[string]*callRecord
	results  []*toolwirev1.CallResult // batch order, from client.CollectFor
	status   *status.Status           // how the RPC ended
	problems []string                 // broken rules that hold for every batch
}

// callRecord is what the stream showed of one call.
type callRecord struct {
	letters  []byte
	progress []*toolwirev1.CallProgress
	result   *toolwirev1.CallResult
}

// runBatch executes calls as one batch, recording every event, and cancels
// the RPC as cancel says.
func runBatch(ctx context.Context, c *client.Client, calls []*toolwirev1.ToolCall, cancel *CancelAfter) *batchRecord {
	rec := &batchRecord{calls: calls, position: map[string]int{}, perCall: map[string]*callRecord{}}
	for i, call := range calls {
		if _, dup := rec.position[call.GetCallId()]; !dup {
			rec.position[call.GetCallId()] = i
		}
		rec.perCall[call.GetCallId()] = &callRecord{}
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	req := &toolwirev1.ExecuteBatchRequest{Calls: calls}
	events := c.ExecuteBatch(ctx, req)
	// Tap the events on their way to Collect: a UI would show progress here.
	tapped := func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for ev, err := range events {
			if err == nil {
				rec.add(ev)
				if p := ev.GetProgress(); cancel != nil && p != nil && p.GetCallId() == cancel.CallID {
					if cr := rec.perCall[cancel.CallID]; cr != nil && len(cr.progress) == cancel.AfterProgress {
						// Cancel and read on: the stream then ends with CANCELLED.
						stop()
					}
				}
			}
			if !yield(ev, err) {
				return
			}
		}
	}
	batch, err := client.CollectFor(req, tapped)
	rec.results = batch.Results
	if s, ok := status.FromError(err); ok {
		rec.status = s
	} else {
		// Collect's own complaint: the stream broke the protocol.
		rec.status = status.New(codes.OK, "")
		rec.problems = append(rec.problems, err.Error())
	}
	return rec
}

// add records an event and checks the rules that hold for every batch.
func (rec *batchRecord) add(ev *toolwirev1.ExecuteBatchResponse) {
	problem := func(format string, args ...any) {
		rec.problems = append(rec.problems, fmt.Sprintf(format, args...))
	}
	// known checks that an event names a call of the batch by its position.
	known := func(kind, id string, index uint32) *callRecord {
		i, ok := rec.position[id]
		if !ok {
			problem("%s event for call %q, which is not in the batch", kind, id)
			return nil
		}
		if int(index) != i {
			problem("%s event for call %q has index %d, want %d", kind, id, index, i)
		}
		return rec.perCall[id]
	}
	switch e := ev.GetEvent().(type) {
	case *toolwirev1.ExecuteBatchResponse_Accepted:
		rec.letters = append(rec.letters, 'A')
		rec.accepted = e.Accepted
	case *toolwirev1.ExecuteBatchResponse_Started:
		rec.letters = append(rec.letters, 'S')
		if cr := known("started", e.Started.GetCallId(), e.Started.GetIndex()); cr != nil {
			cr.letters = append(cr.letters, 'S')
			if lane := rec.laneOf(e.Started.GetCallId()); lane != int(e.Started.GetLane()) {
				problem("call %q started in lane %d; the plan puts it in lane %d", e.Started.GetCallId(), e.Started.GetLane(), lane)
			}
		}
	case *toolwirev1.ExecuteBatchResponse_Progress:
		rec.letters = append(rec.letters, 'P')
		p := e.Progress
		if cr := known("progress", p.GetCallId(), p.GetIndex()); cr != nil {
			cr.letters = append(cr.letters, 'P')
			if n := len(cr.progress); n > 0 && p.Progress != nil && cr.progress[n-1].Progress != nil &&
				p.GetProgress() < cr.progress[n-1].GetProgress() {
				problem("call %q: progress went back from %g to %g", p.GetCallId(), cr.progress[n-1].GetProgress(), p.GetProgress())
			}
			cr.progress = append(cr.progress, p)
		}
	case *toolwirev1.ExecuteBatchResponse_Result:
		rec.letters = append(rec.letters, 'R')
		r := e.Result
		if cr := known("result", r.GetCallId(), r.GetIndex()); cr != nil {
			cr.letters = append(cr.letters, 'R')
			cr.result = r
			if want := rec.calls[rec.position[r.GetCallId()]].GetName(); r.GetToolName() != want {
				problem("result of call %q names tool %q, want %q", r.GetCallId(), r.GetToolName(), want)
			}
		}
	case *toolwirev1.ExecuteBatchResponse_Finished:
		rec.letters = append(rec.letters, 'F')
		rec.finished = e.Finished
	}
}

// laneOf returns the index of the planned lane holding the call, or -1.
func (rec *batchRecord) laneOf(id string) int {
	for _, l := range rec.accepted.GetLanes() {
		for _, c := range l.GetCallIds() {
			if c == id {
				return int(l.GetIndex())
			}
		}
	}
	return -1
}
