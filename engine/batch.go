package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/engine/internal/outbox"
	"github.com/toolwire/toolwire/engine/internal/slots"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/monotime"
	"github.com/toolwire/toolwire/internal/suggest"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// MaxListedNames bounds the tool names an UNKNOWN_TOOL result lists.
const MaxListedNames = 20

// Bounds on the strings a batch carries. An ID or key longer than
// MaxIDBytes makes the batch InvalidArgument (Stripe allows 255 for its
// idempotency keys); a name longer than MaxNameBytes, the contract's limit,
// names no tool, and is cut to shownBytes wherever it is shown.
const (
	MaxIDBytes   = 256
	MaxNameBytes = 128
	shownBytes   = 64
)

// Check rejects with InvalidArgument a batch the runtime must fix, before
// anything runs; Run calls it first. Its messages name calls by index and
// quote IDs only once they are known to be short.
func (e *Engine) Check(req *toolwirev1.ExecuteBatchRequest) error {
	calls := req.GetCalls()
	if len(calls) == 0 {
		return errorf(InvalidArgument, "batch has no calls")
	}
	if len(calls) > e.cfg.MaxCallsPerBatch {
		return errorf(InvalidArgument, "batch has %d calls; the limit is %d", len(calls), e.cfg.MaxCallsPerBatch)
	}
	if d := req.GetOptions().GetTimeout(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
		return errorf(InvalidArgument, "options.timeout is not a valid non-negative duration")
	}
	if n := len(req.GetSessionId()); n > MaxIDBytes {
		return errorf(InvalidArgument, "session_id %s is %d bytes; the limit is %d", shorten(req.GetSessionId()), n, MaxIDBytes)
	}
	seen := make(map[string]int, len(calls))
	ids := 0 // bytes of call IDs, each echoed in BatchAccepted
	for i, c := range calls {
		id := c.GetCallId()
		switch n := len(id); {
		case n == 0:
			return errorf(InvalidArgument, "call %d has an empty call_id", i)
		case n > MaxIDBytes:
			return errorf(InvalidArgument, "call %d: call_id %s is %d bytes; the limit is %d", i, shorten(id), n, MaxIDBytes)
		}
		if j, dup := seen[id]; dup {
			return errorf(InvalidArgument, "calls %d and %d share call_id %q", j, i, id)
		}
		seen[id] = i
		ids += len(id) + laneOverhead
		if n := len(c.GetIdempotencyKey()); n > MaxIDBytes {
			return errorf(InvalidArgument, "call %d (call_id %q): idempotency_key %s is %d bytes; the limit is %d",
				i, id, shorten(c.GetIdempotencyKey()), n, MaxIDBytes)
		}
		if n := len(c.GetArguments()); n > e.cfg.MaxArgumentBytes {
			return errorf(InvalidArgument, "call %d (call_id %q): arguments are %d bytes; the limit is %d", i, id, n, e.cfg.MaxArgumentBytes)
		}
		if d := c.GetTimeout(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
			return errorf(InvalidArgument, "call %d (call_id %q): timeout is not a valid non-negative duration", i, id)
		}
	}
	// BatchAccepted lists every call ID; it must fit in one message.
	if ids > e.cfg.MaxMessageBytes-eventOverhead {
		return errorf(InvalidArgument, "the batch's call IDs take %d bytes together, too many for the %d-byte message that lists them; use shorter IDs or fewer calls",
			ids, e.cfg.MaxMessageBytes)
	}
	return nil
}

// Allowances for the protobuf framing around what an event carries: per
// call ID in BatchAccepted (its lane, index, tags and lengths), and per event.
const (
	laneOverhead  = 16
	eventOverhead = 1 << 10
)

// shorten quotes s for a message, cut to shownBytes with a marker when
// longer.
// checkID refuses, with InvalidArgument, an ID a request names (a batch's,
// a call's) longer than any the server hands out or accepts, before it
// reaches the store or a log.
func checkID(what, id string) error {
	if n := len(id); n > MaxIDBytes {
		return errorf(InvalidArgument, "%s %s is %d bytes; the limit is %d", what, shorten(id), n, MaxIDBytes)
	}
	return nil
}

func shorten(s string) string {
	if len(s) <= shownBytes {
		return strconv.Quote(s)
	}
	return strconv.Quote(cutUTF8(s, shownBytes)) + "…"
}

// shortName returns a tool name fit to show: as given when the contract
// allows its length, else cut to shownBytes and marked. A cut name still
// names no tool, since "…" is not allowed in names.
func shortName(name string) string {
	if len(name) <= MaxNameBytes {
		return name
	}
	return cutUTF8(name, shownBytes) + "…"
}

// batch is one accepted batch on its way through the lanes.
type batch struct {
	e        *Engine
	id       string // made when admitted; see handle.go
	req      *toolwirev1.ExecuteBatchRequest
	snap     *tools.Snapshot
	calls    []callState // per call, as the request orders them
	lanes    []Lane
	parallel int
	// callerCtx is the caller's context: its identity and values, and its
	// deadline, which bounds the calls. A batch that is not detached dies
	// with its stream, whose context this is: no event is queued after it
	// ends. A detached batch's keeps the values only.
	callerCtx   context.Context
	caller      string                  // CallerFrom(callerCtx), read once: Batches compares it under the engine's lock
	cancel      context.CancelCauseFunc // ends the batch's run; set when admitted
	stopTimeout context.CancelFunc      // stops the batch deadline's timer; nil without one
	detached    bool                    // the batch outlives its stream; see handle.go
	sink        Sink                    // Run's: the one reader of a batch that is not detached, the first attachment of one that is
	weight      int                     // what the sink holds of an event, in encoded sizes (WeightedSink)
	seq         uint64                  // the writer's: the number of the last event written
	log         *batchLog               // a detached batch's log in the store; nil when not detached
	out         outbox.Outbox           // events on their way to the writer
	sending     atomic.Int64            // when the Send under way began (monotime.Now); 0 between sends
	ended       atomic.Int32            // why the watchdog ended the stream (endSendTimeout, endOverBudget); endNone
	failed      atomic.Bool             // some call has failed, for stop_on_error
	lanesEnded  atomic.Bool             // every call has its result: the batch runs no more, though BatchFinished may be on its way
	reserved    slots.Slot              // taken before the batch was accepted, for its first call; see limits.go
	start       time.Time
	info        *BatchInfo                      // what the Observer is told of it; nil without one; see observe.go
	obsCtx      atomic.Pointer[context.Context] // what the Observer's BatchStarted returned; nil before
	scope       logScope                        // names the batch in log lines; see LogHandler
	runCtx      context.Context                 // the context run was given

	// A one-call batch, the commonest kind, keeps its call and its lane
	// here, sparing it the allocations of the slices.
	one     [1]callState
	oneLane [1]Lane

	// A unary batch (Engine.Call's) has no sink and sends no event: its
	// call's result is kept in result, which finish sets before the lanes
	// end and the writer returns.
	unary  bool
	result *toolwirev1.CallResult

	// What UNKNOWN_TOOL results say, made at the first (unknownNames).
	unknownOnce sync.Once
	unknown     *unknownSet
}

// firstCall is the calls of a one-call batch's lane; never written.
var firstCall = []int{0}

func (e *Engine) newBatch(ctx context.Context, snap *tools.Snapshot, req *toolwirev1.ExecuteBatchRequest, sink Sink) *batch {
	b := &batch{
		e:         e,
		req:       req,
		snap:      snap,
		callerCtx: ctx,
		caller:    CallerFrom(ctx),
		detached:  req.GetOptions().GetDetach(),
		sink:      sink,
		weight:    1,
		start:     time.Now(),
	}
	if w, ok := sink.(WeightedSink); ok {
		b.weight = max(1, w.Weight())
	}
	b.out.Init(e.cfg.MaxStreamBufferBytes, e.cfg.EventBuffer, e.budget)
	if n := len(req.GetCalls()); n == 1 {
		b.calls = b.one[:]
	} else {
		b.calls = make([]callState, n)
	}
	var safeBuf [16]bool // Plan keeps nothing of it
	safe := safeBuf[:0]
	if len(req.GetCalls()) > len(safeBuf) {
		safe = make([]bool, 0, len(req.GetCalls()))
	}
	safe = safe[:len(req.GetCalls())]
	for i, c := range req.GetCalls() {
		// A name longer than the contract allows names no tool. It is cut
		// here, once, so that no result, event, span or log line carries
		// more of it; unknownTool still tells its length.
		if len(c.GetName()) > MaxNameBytes {
			b.calls[i].cutFrom = len(c.GetName())
			c.Name = shortName(c.GetName())
		}
		// A call the caller may not make is planned like an unknown tool,
		// so the lane plan reveals nothing about the registry.
		if !e.Permits(b.callerCtx, c.GetName()) {
			b.calls[i].refused = true
		} else if t, ok := snap.Lookup(c.GetName()); ok {
			b.calls[i].tool = t
			safe[i] = e.safe(t)
		}
	}
	if len(safe) == 1 {
		// What Plan returns, without its two allocations.
		b.oneLane[0] = Lane{Calls: firstCall, Parallel: safe[0] && !req.GetOptions().GetSequential()}
		b.lanes = b.oneLane[:]
	} else {
		b.lanes = Plan(safe, req.GetOptions().GetSequential())
	}
	b.parallel = e.cfg.MaxParallel
	if p := int(req.GetOptions().GetMaxParallel()); p > 0 && p < b.parallel {
		b.parallel = p
	}
	return b
}

// alone reports whether the batch is one call that ends with its stream
// (not detached), whose end may then end the batch: the call's context is
// the batch's (see callRun.run).
func (b *batch) alone() bool { return len(b.calls) == 1 && !b.detached }

// accepted is the batch's first event.
func (b *batch) accepted() *toolwirev1.ExecuteBatchResponse {
	if len(b.req.GetCalls()) == 1 {
		l := b.lanes[0]
		return oneCallAcceptedEvent(b.id, b.snap.Revision(), b.req.GetCalls()[0].GetCallId(), l.Parallel)
	}
	lanes := make([]*toolwirev1.Lane, len(b.lanes))
	for i, l := range b.lanes {
		ids := make([]string, len(l.Calls))
		for j, c := range l.Calls {
			ids[j] = b.req.GetCalls()[c].GetCallId()
		}
		lanes[i] = &toolwirev1.Lane{Index: uint32(i), CallIds: ids, Parallel: l.Parallel}
	}
	return acceptedEventFor(b.id, b.snap.Revision(), lanes)
}

// finished is the batch's last event.
func (b *batch) finished() *toolwirev1.ExecuteBatchResponse {
	ev, f := finishedEventFor(b.id, time.Since(b.start))
	for i := range b.calls {
		r := &b.calls[i].ended
		switch {
		case r.kind == toolwirev1.ErrorKind_ERROR_KIND_SKIPPED:
			f.Skipped++
		case r.isError:
			f.Failed++
		default:
			f.Succeeded++
		}
		switch r.kind {
		case toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT:
			f.Cancelled++
		}
		if r.replayed {
			f.Replayed++
		}
	}
	return ev
}

// write is the batch's one writer; it returns when the batch's events are
// all sent (or, for a detached batch, appended to its log). After a failed
// Send the batch is cancelled and its remaining events are drained unsent.
// The engine's send watchdog (see sendwatch.go) watches how long each Send
// takes.
func (b *batch) write(cancel context.CancelCauseFunc) error {
	var sendErr error
	if !b.unary {
		if sendErr = b.send(b.accepted()); sendErr != nil {
			cancel(sendErr)
		}
	}
	for {
		p, ok := b.out.Next()
		if !ok {
			return sendErr
		}
		if sendErr == nil {
			if sendErr = b.send(p.Event); sendErr != nil {
				cancel(sendErr)
			}
		}
		b.out.Sent(p)
	}
}

// send numbers ev (its seq) and sends it to the batch's reader, marking the time
// the Send began for the send watchdog. (A detached batch's writer is
// batchLog.run, which writes its events to its log in groups.)
func (b *batch) send(ev *toolwirev1.ExecuteBatchResponse) error {
	b.seq++
	ev.Seq = b.seq
	b.sending.Store(monotime.Now())
	err := b.sink.Send(ev)
	b.sending.Store(0)
	return err
}

// emit hands an event to the stream writer, waiting while the batch's
// events waiting for a slow reader hold their budget (MaxStreamBufferBytes,
// EventBuffer); after the caller's context has ended the event is dropped.
func (b *batch) emit(ev *toolwirev1.ExecuteBatchResponse) {
	b.out.Put(b.callerCtx.Done(), ev, b.weight*proto.Size(ev), false)
}

// emitStarted hands a call's CallStarted to the writer without waiting: the
// call holds a concurrency slot, which must not wait for a slow reader. One
// small event per call is all it adds beyond the budget.
func (b *batch) emitStarted(ev *toolwirev1.ExecuteBatchResponse) {
	b.out.Put(nil, ev, b.weight*proto.Size(ev), true)
}

// run executes the lanes in order and closes the event channel when every
// call has its result. Once ctx is done nothing new starts: calls not yet
// started get CANCELLED (or TIMEOUT) results.
func (b *batch) run(ctx context.Context) {
	b.runCtx = ctx
	b.runFrom(ctx, 0)
}

// runFrom runs the lanes from index li on. When a call it runs itself is
// abandoned, the call's watchdog continues the batch on a new goroutine (see
// callRun.abandon) and this one returns as soon as the tool lets it.
func (b *batch) runFrom(ctx context.Context, li int) {
	for ; li < len(b.lanes); li++ {
		lane := b.lanes[li]
		b.obsLane(li)
		if b.failed.Load() && b.req.GetOptions().GetStopOnError() {
			for _, i := range lane.Calls {
				b.finish(i, b.failure(i, toolwirev1.ErrorKind_ERROR_KIND_SKIPPED, "skipped: an earlier call in this batch failed and the batch was sent with stop_on_error"))
			}
			continue
		}
		if len(lane.Calls) == 1 {
			if !b.startCall(ctx, li, lane.Calls[0], nil) {
				return
			}
			continue
		}
		li := li // the closures below capture this copy, so the parameter stays on the stack
		sem := make(chan struct{}, b.parallel)
		var wg sync.WaitGroup
		for _, i := range lane.Calls {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				b.startCall(ctx, li, i, nil) // reports the cancellation without running
				continue
			}
			wg.Add(1)
			release := sync.OnceFunc(func() { <-sem; wg.Done() })
			b.e.runners.Go(func() {
				b.startCall(ctx, li, i, release)
				release()
			})
		}
		wg.Wait()
	}
	b.lanesEnded.Store(true)
	b.out.Close()
	if b.log != nil && b.log.deferred && b.log.claimWriter() {
		b.writeLog() // every event is queued: one write, the window not having passed
	}
}

// failure is the result of call i failing with kind before its tool ran.
func (b *batch) failure(i int, kind toolwirev1.ErrorKind, msg string) *toolwirev1.CallResult {
	res := b.newTimedResult(i, 0)
	errorResult(res, kind, msg)
	return res
}

func (b *batch) newResult(i int) *toolwirev1.CallResult {
	c := b.req.GetCalls()[i]
	return &toolwirev1.CallResult{CallId: c.GetCallId(), Index: uint32(i), ToolName: c.GetName()}
}

// callSummary is what a batch keeps of a call's result once it is handed to
// the writer: enough for BatchFinished's counts. Keeping the results
// themselves would hold every call's output until the batch ends.
type callSummary struct {
	ended    bool
	isError  bool
	replayed bool
	kind     toolwirev1.ErrorKind
}

// finish is the one place a call ends, whoever ends it (a step of its path,
// its tool's return, its watchdog): the result is mended to UTF-8
// (validUTF8), recorded under the call's idempotency key before it is
// sent, held to MaxResultBytes and the message size whatever produced it,
// counted (telemetry, the debug log, BatchFinished) and handed to the
// writer.
func (b *batch) finish(i int, res *toolwirev1.CallResult) {
	c := &b.calls[i]
	validUTF8(res)
	c.claim.settle(res)
	c.claim, c.args = nil, nil
	bound(res, b.e.cfg.MaxResultBytes)
	if tooLarge(res, &b.e.cfg) {
		b.e.deps.Logger.Error("result too large to send", "batch_id", b.id, "call_id", res.GetCallId(), "blocks", len(res.GetContent()))
		size := res.GetOriginalSize()
		res.Truncated, res.StructuredContent, res.Details = false, "", ""
		errorResult(res, toolwirev1.ErrorKind_ERROR_KIND_INTERNAL, fmt.Sprintf(
			"the result (%d blocks, %d bytes) could not be sent: it exceeds the %d-byte message limit", len(res.GetContent()), size, b.e.cfg.MaxMessageBytes))
	}
	c.ended = callSummary{ended: true, isError: res.GetIsError(), replayed: res.GetReplayed(), kind: res.GetErrorKind()}
	b.obsCallEnded(i, res)
	if res.GetIsError() {
		b.failed.Store(true)
	}
	if b.unary {
		b.result = res // read once the lanes have ended (out.close)
		return
	}
	b.emit(resultEventFor(res))
}

// cancelled describes why ctx, the batch's context, ended.
func cancelled(ctx context.Context) (toolwirev1.ErrorKind, string) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errBatchTimeout):
		return toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, "timed out: the batch deadline passed"
	case errors.Is(cause, errShutdown):
		return toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, "cancelled: the server is shutting down; the call may be retried"
	case errors.Is(cause, ErrSendTimeout):
		return toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, "cancelled: the client read nothing of the stream for the send timeout, so the server ended it"
	case errors.Is(cause, ErrOverBudget):
		return toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, "cancelled: the client left the stream's events unread while the server ran short of memory for unread events, so the server ended it"
	default:
		if msg, ok := cancelRequested(cause); ok {
			return toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, msg
		}
		return toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, "cancelled by the client"
	}
}

// unknownTool explains to the model that call i names a tool that does not
// exist.
func (b *batch) unknownTool(i int, call *toolwirev1.ToolCall) string {
	name := strconv.Quote(call.GetName())
	if n := b.calls[i].cutFrom; n > 0 {
		name += fmt.Sprintf(" (cut from %d bytes; a tool name is at most %d bytes of A-Za-z0-9_.-)", n, MaxNameBytes)
	}
	if isWrapper(call) {
		return fmt.Sprintf("%s is not a tool: it wraps several tool calls in one. Call each tool directly, one tool call each; read-only calls are run in parallel anyway. Nothing was run.", name)
	}
	u := b.unknownNames()
	if len(u.names) == 0 {
		return fmt.Sprintf("unknown tool %s: no tools are registered", name)
	}
	// Of a thousand tools the list shows twenty; a misspelt name's
	// nearest (among those the caller may see) is what the model needs.
	if b.calls[i].cutFrom == 0 {
		if near := u.nearest(call.GetName()); near != "" {
			return fmt.Sprintf("unknown tool %s; did you mean %q? Registered tools: %s", name, near, u.list)
		}
	}
	return fmt.Sprintf("unknown tool %s. Registered tools: %s", name, u.list)
}

// unknownSet is what a batch's UNKNOWN_TOOL results say of the tools its
// caller may call, worked out once per batch, at its first unknown call,
// and each misspelt name's nearest once: per call, a batch of 1024
// misspelt calls on a catalog of 10,000 tools asked the admission ten
// million times and compared names for 14 s of CPU.
type unknownSet struct {
	names []string // the tools the caller may call, sorted
	list  string   // the first MaxListedNames of them, and how many more

	mu   sync.Mutex
	near map[string]string // the nearest of each name looked for; "" for none
}

// maxSuggested bounds the names one batch looks for the nearest of; the
// rest are answered with the list alone. A model misspells a name or
// two; a batch of a thousand different unknown names is not a model's.
const maxSuggested = 8

// unknownNames returns the batch's unknownSet, made on first use.
func (b *batch) unknownNames() *unknownSet {
	b.unknownOnce.Do(func() {
		u := &unknownSet{names: b.visibleNames()}
		u.list = strings.Join(u.names[:min(len(u.names), MaxListedNames)], ", ")
		if len(u.names) > MaxListedNames {
			u.list += fmt.Sprintf(", … (%d more)", len(u.names)-MaxListedNames)
		}
		b.unknown = u
	})
	return b.unknown
}

// nearest returns the name of u.names nearest to name (suggest.Nearest),
// or "" when none is near or the batch has looked for maxSuggested others.
func (u *unknownSet) nearest(name string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if near, ok := u.near[name]; ok {
		return near
	}
	if len(u.near) >= maxSuggested {
		return ""
	}
	near, _ := suggest.Nearest(name, u.names)
	if u.near == nil {
		u.near = make(map[string]string)
	}
	u.near[name] = near
	return near
}

// isWrapper tells calls shaped like multi_tool_use.parallel, which some
// models emit to bundle calls, from a plain misspelt name.
func isWrapper(call *toolwirev1.ToolCall) bool {
	if strings.HasPrefix(call.GetName(), "multi_tool_use") {
		return true
	}
	if !strings.Contains(call.GetArguments(), `"tool_uses"`) {
		return false
	}
	var args struct {
		ToolUses json.RawMessage `json:"tool_uses"`
	}
	return json.Unmarshal([]byte(call.GetArguments()), &args) == nil && len(args.ToolUses) > 0
}
