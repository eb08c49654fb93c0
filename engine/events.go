package engine

import (
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The events a batch streams are each a message inside a oneof wrapper
// inside an ExecuteBatchResponse, with a Duration or a content block inside
// that: several small allocations for every event. The constructors here
// allocate each event's messages together, as one struct; allocation was
// the largest cost a batch adds to the RPC's own.

type startedEvent struct {
	resp  toolwirev1.ExecuteBatchResponse
	oneof toolwirev1.ExecuteBatchResponse_Started
	msg   toolwirev1.CallStarted
}

func startedEventFor(callID string, i, lane int) *toolwirev1.ExecuteBatchResponse {
	e := &startedEvent{msg: toolwirev1.CallStarted{CallId: callID, Index: uint32(i), Lane: uint32(lane)}}
	e.oneof.Started = &e.msg
	e.resp.Event = &e.oneof
	return &e.resp
}

type acceptedEvent struct {
	resp  toolwirev1.ExecuteBatchResponse
	oneof toolwirev1.ExecuteBatchResponse_Accepted
	msg   toolwirev1.BatchAccepted
}

func acceptedEventFor(batchID, revision string, lanes []*toolwirev1.Lane) *toolwirev1.ExecuteBatchResponse {
	e := &acceptedEvent{msg: toolwirev1.BatchAccepted{BatchId: batchID, Lanes: lanes, Revision: revision}}
	e.oneof.Accepted = &e.msg
	e.resp.Event = &e.oneof
	return &e.resp
}

type oneCallAccepted struct {
	acceptedEvent
	lanes [1]*toolwirev1.Lane
	lane  toolwirev1.Lane
	ids   [1]string
}

// oneCallAcceptedEvent is acceptedEventFor a batch of one call, whose plan
// is one lane.
func oneCallAcceptedEvent(batchID, revision, callID string, parallel bool) *toolwirev1.ExecuteBatchResponse {
	e := &oneCallAccepted{}
	e.ids[0] = callID
	e.lane.CallIds, e.lane.Parallel = e.ids[:], parallel
	e.lanes[0] = &e.lane
	e.msg.BatchId, e.msg.Lanes, e.msg.Revision = batchID, e.lanes[:], revision
	e.oneof.Accepted = &e.msg
	e.resp.Event = &e.oneof
	return &e.resp
}

type finishedEvent struct {
	resp  toolwirev1.ExecuteBatchResponse
	oneof toolwirev1.ExecuteBatchResponse_Finished
	msg   toolwirev1.BatchFinished
	dur   durationpb.Duration
}

// finishedEventFor returns the batch's last event, taking d as its
// duration; fill in the counts through the returned message.
func finishedEventFor(batchID string, d time.Duration) (*toolwirev1.ExecuteBatchResponse, *toolwirev1.BatchFinished) {
	e := &finishedEvent{msg: toolwirev1.BatchFinished{BatchId: batchID}}
	setDuration(&e.dur, d)
	e.msg.Duration = &e.dur
	e.oneof.Finished = &e.msg
	e.resp.Event = &e.oneof
	return &e.resp, &e.msg
}

type resultEvent struct {
	resp  toolwirev1.ExecuteBatchResponse
	oneof toolwirev1.ExecuteBatchResponse_Result
}

func resultEventFor(res *toolwirev1.CallResult) *toolwirev1.ExecuteBatchResponse {
	e := &resultEvent{oneof: toolwirev1.ExecuteBatchResponse_Result{Result: res}}
	e.resp.Event = &e.oneof
	return &e.resp
}

type timedResult struct {
	res toolwirev1.CallResult
	dur durationpb.Duration
}

// newTimedResult is newResult with its duration set to d.
func (b *batch) newTimedResult(i int, d time.Duration) *toolwirev1.CallResult {
	c := b.req.GetCalls()[i]
	r := &timedResult{res: toolwirev1.CallResult{CallId: c.GetCallId(), Index: uint32(i), ToolName: c.GetName()}}
	setDuration(&r.dur, d)
	r.res.Duration = &r.dur
	return &r.res
}

// setDuration sets p to d, as durationpb.New does.
func setDuration(p *durationpb.Duration, d time.Duration) {
	nanos := d.Nanoseconds()
	p.Seconds, p.Nanos = nanos/1e9, int32(nanos%1e9)
}

type textContent struct {
	block toolwirev1.Content
	oneof toolwirev1.Content_Text
	text  toolwirev1.TextContent
}

func textBlock(s string) *toolwirev1.Content {
	c := &textContent{text: toolwirev1.TextContent{Text: s}}
	c.oneof.Text = &c.text
	c.block.Block = &c.oneof
	return &c.block
}
