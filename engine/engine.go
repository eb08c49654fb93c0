// Package engine runs toolwire's batches and calls with no transport in
// them: it checks a batch, plans it into lanes, admits it (batch and call
// limits, draining), takes each call through permission, validation,
// idempotency and limits, runs it under its deadline with cancellation,
// panic recovery and output caps, records and shapes its result, and hands
// the batch's events, in contract order, to a Sink from one goroutine.
// It owns session variables, abandonment, backpressure (each batch's
// outbox and the server-wide budget of buffered events), the send
// watchdog's logic, batch and call telemetry, and the debug log lines.
//
// Surfaces (the gRPC service in service/, later Connect/JSON, MCP, a
// console) sit on top: they authenticate, put the caller in the context
// with WithCaller, call Run with a sink of their own (or Call, for one call
// answered by its result, as CallTool is), and map the *Error Run returns
// to their wire format at their edge (CodeOf).
//
// Import rules: engine must not import google.golang.org/grpc or any of its
// packages (codes, status, metadata, peer, …), nor service/ or any surface;
// the generated message types (gen/toolwire/v1) are its event vocabulary.
// TestNoTransport enforces the first rule.
package engine

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/engine/internal/outbox"
	"github.com/toolwire/toolwire/engine/internal/rates"
	"github.com/toolwire/toolwire/engine/internal/runners"
	"github.com/toolwire/toolwire/engine/internal/sequence"
	"github.com/toolwire/toolwire/engine/internal/slots"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/holds"
	"github.com/toolwire/toolwire/tools"
)

// Sink receives a batch's events. Run calls Send from one goroutine, in the
// contract's order: BatchAccepted, then per call CallStarted, CallProgress
// and CallResult, then BatchFinished. A Send that fails ends the batch: its
// calls are cancelled, their results still recorded, and Run returns the
// error.
type Sink interface {
	Send(*toolwirev1.ExecuteBatchResponse) error
}

// A WeightedSink is a Sink that holds an event several times over while
// it writes it: the MCP surface keeps a result as JSON three times (the
// result, the JSON-RPC message, the SSE event) besides the call's own.
// What its batch holds for a slow reader counts against
// MaxStreamBufferBytes and MaxBufferedBytes as each event's encoded size
// times Weight, so that the budgets bound what the server holds.
type WeightedSink interface {
	Sink
	Weight() int // ≥ 1
}

// SinkFunc is a function as a Sink.
type SinkFunc func(*toolwirev1.ExecuteBatchResponse) error

func (f SinkFunc) Send(ev *toolwirev1.ExecuteBatchResponse) error { return f(ev) }

// Stopper ends a Send that can block for good, such as a stream's held by
// flow control. When one Send has taken Config.SendTimeout, or the events
// waiting for slow readers passed Config.MaxBufferedBytes and this
// stream's client holds the most, the engine cancels the batch's calls
// with cause ErrSendTimeout or ErrOverBudget and calls StopSend with that
// cause, which must make that Send return; it reports whether it could. The
// engine finds it in the sink itself, or else as the value of StopperKey
// in Run's context (where a transport can put it without wrapping its
// stream in another sink).
type Stopper interface {
	StopSend(cause error) bool
}

// StopperKey is the context key of a batch's Stopper; see Stopper.
type StopperKey struct{}

// Causes of a batch's cancellation, told apart in results.
var (
	errShutdown     = errors.New("the server is shutting down")
	errBatchTimeout = errors.New("the batch deadline passed")
	errIdle         = errors.New("no progress")
	// ErrSendTimeout is the cause with which a batch is cancelled when its
	// sink took Config.SendTimeout over one Send.
	ErrSendTimeout = errors.New("the client read nothing for the send timeout")
)

// Engine runs batches of tool calls over a registry.
type Engine struct {
	cfg  Config
	deps Deps

	mu        sync.Mutex
	draining  bool
	batches   map[string]*batch       // running batches by ID; at most MaxConcurrentBatches (see handle.go)
	readers   map[*logReader]struct{} // detached batches' readers, for the send watchdog (readwatch.go)
	active    sync.WaitGroup          // running batches
	stopping  chan struct{}           // closed when draining begins
	closed    chan struct{}           // closed by Close: retries in the background give up
	closeOnce sync.Once
	watching  bool // watchSends is running

	abandoned   atomic.Int64
	budget      *outbox.Budget     // the events waiting for slow readers, all batches'
	shedCount   atomic.Int64       // streams ended for the budget, ever; see shed
	runners     *runners.Pool      // the goroutines batches run on
	limits      *slots.Limiter     // call slots, server-wide and per caller
	scans       *slots.Limiter     // listings and searches of a large catalog running at once; see listing.go
	rates       *rates.Buckets     // nil without a rate limit
	obs         Observer           // nil: none
	rec         CallRecorder       // the CallRecorders among obs; nil: none
	seq         sequence.Sequencer // the calls of sessions that arrive one at a time; see Sequence
	held        approvals          // calls held for approval on this engine; see approval.go
	catalog     catalog            // SearchTools' index of the last snapshot searched; see listing.go
	heldRecs    heldRecords        // idempotency records the store has not taken yet; see records.go
	watches     holds.Counter      // WatchTools streams open, by caller; see watches.go
	unstored    atomic.Int64       // bytes of detached batches' events the store has not taken, all batches'; see eventlog.go
	maxUnstored int64              // unstored's bound: maxUnstoredBytes, or a test's
	renewals    renewals           // the detached batches' logs whose leases it renews; see renewals.go

	fallbackPoll time.Duration // tests' stand-in for the const fallbackPoll when set; see signals.go
	openWindow   time.Duration // tests' stand-in for the const openWindow when set; see eventlog.go
	afterRenew   func()        // tests' hook: called as each renewal of a detached batch's lease returns; see renewals.go
}

// New returns an engine. It holds no registry: each Run is given the
// snapshot of tools its batch runs against, so a surface decides which
// (its registry's current one, usually) and the lane plan, the tools run
// and the revision in BatchAccepted all come from that one snapshot.
//
// cfg is its settings, the zero value of each meaning its default; deps
// are what it is given to work with (see Deps).
func New(cfg Config, deps Deps) *Engine {
	e := &Engine{
		cfg:         cfg.withDefaults(),
		deps:        deps.withDefaults(),
		batches:     make(map[string]*batch),
		maxUnstored: maxUnstoredBytes,
		stopping:    make(chan struct{}),
		closed:      make(chan struct{}),
		runners:     runners.New(10 * time.Second),
	}
	e.budget = outbox.NewBudget(e.cfg.MaxBufferedBytes)
	e.watches = holds.Counter{Max: e.cfg.MaxWatches, PerHolder: e.cfg.MaxWatchesPerCaller}
	e.heldRecs.init(e)
	perCaller, anonymous := e.cfg.callerShare()
	e.limits = slots.New(e.cfg.MaxConcurrentCalls, perCaller, anonymous)
	e.scans = slots.New(scanSlots(), 1, false)
	if e.cfg.RatePerCaller > 0 {
		e.rates = rates.New(e.cfg.RatePerCaller, e.cfg.RateBurst, e.deps.RateStore, e.deps.Logger)
	}
	// The debug call log is one more observer, when the logger writes
	// debug lines.
	e.obs = Observers(e.deps.Observer, debugLogFor(e.deps.Logger))
	e.rec = recorderOf(e.obs)
	if eo, ok := e.obs.(EngineObserver); ok {
		eo.EngineStarted(EngineInfo{Buffered: e.budget.Held})
	}
	return e
}

// Config returns the engine's configuration, its defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Logger returns the logger the engine logs on (Deps.Logger, through
// LogHandler): the one a surface on it logs on too.
func (e *Engine) Logger() *slog.Logger { return e.deps.Logger }

// Run runs one batch against the tools of snap, sending its events to
// sink, and returns when the batch has ended (see handle.go for how a
// batch's run and its stream meet). Before BatchAccepted it may refuse the batch with an
// *Error: InvalidArgument (a malformed batch), ResourceExhausted
// (overload), Unavailable (draining), Canceled or DeadlineExceeded (ctx
// ended while it waited). After it, every call gets exactly one result
// and BatchFinished comes last, unless ctx ends or a Send fails. ctx is the
// caller's: its deadline bounds the calls, less Config.DeadlineMargin, and
// it carries the caller (WithCaller).
func (e *Engine) Run(ctx context.Context, snap *tools.Snapshot, req *toolwirev1.ExecuteBatchRequest, sink Sink) error {
	if err := e.Check(req); err != nil {
		return err
	}
	return e.run(ctx, e.newBatch(ctx, snap, req, sink))
}

// run runs the batch b, made by newBatch, to its end; see Run. A unary
// batch (Call's) sends nothing: its one result is kept in b.result. Every
// batch starts the same way (start) and runs its lanes on a runner; what
// differs is who reads its events. A batch that is not detached is read by
// its one writer on Run's goroutine, which sends them to Run's stream
// (stream); a detached batch's writer appends them to its log, on a runner
// of its own, and Run's stream reads the log as any attachment does (see
// handle.go).
func (e *Engine) run(ctx context.Context, b *batch) (err error) {
	runCtx, err := e.start(ctx, b)
	if err != nil {
		return err
	}
	if b.detached && b.log.deferred {
		b.log.armWindow()
	}
	e.runners.Go(func() { b.run(runCtx) })
	if b.detached {
		if !b.log.deferred {
			e.runners.Go(b.writeLog)
		}
		return e.watchReader(ctx, b.sink, func(ctx context.Context, sink Sink) error { return b.log.read(ctx, b.log.first, sink) })
	}
	defer func() { b.end(err) }()
	return b.stream(ctx)
}

// start takes a batch from its request to running, in order: its caller's
// rate allowance, admission (its ID, the batch limit, draining), its log
// scope, the Observer's BatchStarted, the batch deadline, and the slot of
// its first call, waited for while the caller waits so that an overloaded
// server refuses the batch before accepting it; then, for a detached
// batch, its log in the store (or, when deferOpen allows, the log readied
// for its writer to open with the batch's first events). It returns the context the batch runs in:
// the stream's, for a batch that dies with its stream; for a detached
// one, a context that keeps the caller's values (its identity, its trace)
// but not its cancellation or deadline. Once started, a batch ends with
// end; a start that fails has undone what it did, and returns Run's error.
func (e *Engine) start(ctx context.Context, b *batch) (context.Context, error) {
	if e.rates != nil {
		if err := e.rates.Take(ctx, CallerFrom(ctx), len(b.req.GetCalls())); err != nil {
			return nil, rateError(err)
		}
	}
	if b.detached {
		// Detached from the stream on purpose: the batch outlives it.
		b.callerCtx = context.WithoutCancel(ctx)
	}
	runCtx, cancel := context.WithCancelCause(b.callerCtx)
	if err := e.admit(b, cancel); err != nil {
		cancel(nil)
		return nil, err
	}
	b.scope = logScope{b: b, i: -1}
	runCtx = b.obsBatchStarted(context.WithValue(runCtx, logScopeKey{}, &b.scope))
	if d := b.req.GetOptions().GetTimeout(); d != nil && d.AsDuration() > 0 {
		runCtx, b.stopTimeout = context.WithTimeoutCause(runCtx, d.AsDuration(), errBatchTimeout)
	}
	var err error
	if b.detached {
		// The caller still waits for the first slot: its leaving ends the wait.
		stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		err = b.reserve(runCtx)
		stop()
		if err == nil {
			if b.log, err = e.openLog(b); err != nil {
				err = storeError(ctx, err)
			}
		}
	} else {
		err = b.reserve(runCtx)
	}
	if err != nil {
		b.end(err)
		return nil, err
	}
	return runCtx, nil
}

// end undoes what start did, once the batch has ended (or failed to
// start) with err, what Run returns, which the Observer is told.
func (b *batch) end(err error) {
	b.dropReserved()
	if b.stopTimeout != nil {
		b.stopTimeout()
	}
	b.obsBatchEnded(err)
	b.e.release(b)
	b.cancel(nil)
}

// stream is the writer of a batch that is not detached: it sends the
// batch's events to Run's stream, on Run's goroutine, and returns what Run
// does once the lanes have ended.
func (b *batch) stream(ctx context.Context) error {
	sendErr := b.write(b.cancel)
	if err := b.endedError(); err != nil {
		return err
	}
	if sendErr != nil {
		return sendErr
	}
	if ctx.Err() != nil {
		return contextError(ctx.Err())
	}
	if b.unary {
		return nil
	}
	ev := b.finished()
	b.seq++
	ev.Seq = b.seq
	return b.sink.Send(ev)
}

// Call runs one call on the path every call takes, as a batch of one, and
// returns its result: what a unary surface (CallTool) needs. It is Run
// without events: nothing is sent, so the call reports no progress and
// no slow reader can hold it back. The errors are Run's (a nil call is
// InvalidArgument, as an empty call_id is); a failing tool is a result, as
// in a batch.
func (e *Engine) Call(ctx context.Context, snap *tools.Snapshot, call *toolwirev1.ToolCall, sessionID string) (*toolwirev1.CallResult, error) {
	if call == nil {
		return nil, errorf(InvalidArgument, "the request has no call")
	}
	one := &oneCallRequest{}
	one.calls[0] = call
	one.req.Calls, one.req.SessionId = one.calls[:], sessionID
	if err := e.Check(&one.req); err != nil {
		return nil, err
	}
	b := e.newBatch(ctx, snap, &one.req, nil)
	b.unary = true
	if err := e.run(ctx, b); err != nil {
		return nil, err
	}
	if b.result == nil { // every call of an accepted batch gets a result; a backstop
		return nil, errorf(Internal, "the call ended without a result")
	}
	return b.result, nil
}

// oneCallRequest is Call's batch request and its calls in one allocation.
type oneCallRequest struct {
	req   toolwirev1.ExecuteBatchRequest
	calls [1]*toolwirev1.ToolCall
}

// Draining returns a channel closed once Drain has begun: surfaces end
// their long-lived streams (WatchTools) on it.
func (e *Engine) Draining() <-chan struct{} { return e.stopping }

// DrainAfterCancel is how long Drain waits, past AbandonGrace, for the
// batches whose calls it cancelled once DrainTimeout had passed.
const DrainAfterCancel = 5 * time.Second

// Drain refuses new batches (Unavailable), lets running ones finish for
// Config.DrainTimeout, then cancels their calls, which still get results,
// and waits up to AbandonGrace and DrainAfterCancel more for them. It
// returns once no batch runs, or when that wait is over too.
func (e *Engine) Drain() {
	e.mu.Lock()
	if !e.draining {
		e.draining = true
		close(e.stopping)
	}
	e.mu.Unlock()

	drained := make(chan struct{})
	go func() { e.active.Wait(); close(drained) }()
	log := e.deps.Logger
	select {
	case <-drained:
	case <-time.After(e.cfg.DrainTimeout):
		log.Warn("drain timeout passed; cancelling running calls", "drain_timeout", e.cfg.DrainTimeout)
		e.CancelCalls()
		select {
		case <-drained:
		case <-time.After(e.cfg.AbandonGrace + DrainAfterCancel):
			log.Error("batches still running after cancellation; stopping anyway")
		}
	}
}

// CancelCalls cancels the calls of every running batch, with the cause
// "the server is shutting down"; they still get results. Drain calls it
// when DrainTimeout has passed.
func (e *Engine) CancelCalls() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.batches {
		b.cancel(errShutdown)
	}
}

// Close lets the engine's idle goroutines exit, after one last attempt to
// write the idempotency records it holds because the store did not take
// them (at most settleTimeout each). It does not wait for running
// batches; Drain does.
func (e *Engine) Close() {
	e.closeOnce.Do(func() { close(e.closed) })
	e.runners.Close()
	e.heldRecs.close()
}

// Stats is a snapshot of what an engine is doing.
type Stats struct {
	Batches         int   // batches running
	WaitingToReport int   // running batches with calls waiting for room to report (a slow reader)
	CallsRunning    int   // call slots taken engine-wide
	SlotWaiters     int64 // calls and batches waiting for a slot
	Callers         int   // callers holding or waiting for a per-caller slot
	Abandoned       int64 // tools abandoned for ignoring cancellation, ever
	BufferedBytes   int64 // bytes of events waiting for clients, all batches' (see MaxBufferedBytes)
	BufferedPeak    int64 // the most BufferedBytes has been, ever
	EndedOverBudget int64 // streams ended because BufferedBytes passed MaxBufferedBytes, ever
	SessionWaiting  int   // calls waiting for their turn in their session (Sequence)
	HeldRecords     int   // idempotency records held until the store takes them (see docs/retries.md)
}

// Stats returns what the engine is doing now.
func (e *Engine) Stats() Stats {
	st := Stats{
		CallsRunning: e.limits.Running(),
		SlotWaiters:  e.limits.Waiting(),
		Callers:      e.limits.Callers(),
		Abandoned:    e.abandoned.Load(),

		BufferedBytes:   e.budget.Held(),
		BufferedPeak:    e.budget.Peak(),
		EndedOverBudget: e.shedCount.Load(),

		SessionWaiting: e.seq.Waiting(),
		HeldRecords:    e.heldRecs.Len(),
	}
	running := e.running(func(*batch) bool { return true })
	st.Batches = len(running)
	for _, p := range running {
		if p.b.out.Waiting() { // the outbox's lock, not the engine's
			st.WaitingToReport++
		}
	}
	return st
}

// safe reports whether calls of t may share a parallel lane.
func (e *Engine) safe(t *tools.Tool) bool {
	if v, ok := e.cfg.Safe[t.Name]; ok {
		return v
	}
	return t.Annotations.ReadOnly
}

// newID returns a batch ID: unique enough for logs and traces, and cheap
// (no system call, unlike crypto/rand).
func newID() string {
	var b [16]byte
	return string(strconv.AppendUint(b[:0], rand.Uint64()|1<<63, 16))
}
