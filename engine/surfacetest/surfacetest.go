// Package surfacetest holds the behaviour suite every surface passes, as
// store/storetest holds the contract every store backend passes. The
// engine's own tests pin its behaviour with plain sinks; this suite checks
// that a surface (the gRPC service, a unary CallTool, Connect, MCP's
// tools/call) carries that behaviour to its callers, through the surface's
// own protocol: every call of a batch gets one result and the batch's end
// comes last; lanes; cancellation reaches running tools and nothing starts
// after it; deadlines; bounds; authentication and permissions;
// idempotency; unknown tools and bad arguments as results; and, for a
// surface whose adapter implements Handles, a detached batch that outlives
// its request and is found by its ID by its own caller only.
//
// A surface's tests call Run with a function that builds the surface on
// the engine and registry the suite hands it (Config) and returns a test
// adapter (Surface): a client of the surface's protocol that can pass a
// caller's credentials, a session ID, idempotency keys and deadlines, and
// cancel. The suite registers its own tools. Subtests that need what a
// protocol cannot express are skipped as the adapter's Lacks says.
//
// It imports no surface, and no transport.
package surfacetest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store/storetest"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config is what a surface under test is built on.
type Config struct {
	// Engine runs the surface's calls: build the surface on it, as
	// cmd/toolwire hands every surface its one engine. The suite made it
	// and closes it; stopping the surface may drain it.
	Engine *engine.Engine
	// Registry holds the suite's tools; the surface lists and runs its
	// snapshots.
	Registry *tools.Registry
	// Callers are the callers the surface must authenticate: a request
	// bearing a Caller's Token comes from its Name (engine.WithCaller);
	// a request bearing no token, or another, is refused as
	// Unauthenticated.
	Callers []Caller
}

// Caller is who makes a request: Name is the identity the surface must put
// in the context, Token the bearer token that proves it ("" for a request
// without credentials).
type Caller struct {
	Name, Token string
}

// Surface is a surface under test as its test adapter drives it: a client
// of the surface's protocol. ctx carries the request's deadline and
// cancellation; the adapter carries them over the protocol (the deadline
// as the protocol's timeout, ctx's end as cancelling the request).
type Surface interface {
	// Tools lists the tools as the surface lists them to caller.
	Tools(ctx context.Context, caller Caller) ([]*toolwirev1.Tool, error)
	// Batch runs req as caller and returns the events in the order the
	// surface delivered them, and the error that ended the request (nil
	// when it ended cleanly). It is not called when Lacks().Batches.
	Batch(ctx context.Context, caller Caller, req *toolwirev1.ExecuteBatchRequest) ([]*toolwirev1.ExecuteBatchResponse, error)
	// Call runs one call as caller, in session sessionID ("" for none),
	// and returns its result as the surface's protocol carried it, or the
	// request's error.
	Call(ctx context.Context, caller Caller, sessionID string, call *toolwirev1.ToolCall) (*toolwirev1.CallResult, error)
	// Code classifies an error Tools, Batch or Call returned, as the
	// surface's protocol expressed it.
	Code(err error) Code
	// Lacks says what the surface's protocol cannot express.
	Lacks() Lacks
}

// Lacks lists what a surface's protocol cannot express; each subtest that
// needs it is skipped, naming the field. The zero value lacks nothing, so a
// surface runs every subtest unless its adapter says, field by field, what
// it cannot carry.
type Lacks struct {
	// Batches: no batch of calls in one request (an MCP tools/call, a
	// unary CallTool): no lanes, batch events, batch options or batch
	// bounds. Call is still used.
	Batches bool
	// ErrorKinds: results carry is_error and their text, not the
	// contract's error kind; kinds are then checked by is_error and text.
	ErrorKinds bool
	// Replayed: results do not say that they were replayed.
	Replayed bool
	// ArgumentText: a call's arguments travel as a JSON object (MCP's
	// tools/call), not as the text the model produced, so they cannot be
	// malformed JSON or another JSON value.
	ArgumentText bool
	// IdempotencyKeys: a call cannot carry an idempotency key.
	IdempotencyKeys bool
	// CallTimeouts: a call cannot carry a timeout of its own.
	CallTimeouts bool
	// Deadlines: the caller's deadline does not reach the server.
	Deadlines bool
	// Sessions: a request cannot name a session.
	Sessions bool
	// SessionlessCalls: every call belongs to a session, one that names
	// none to the protocol's own (an MCP 2025-11-25 session,
	// Mcp-Session-Id), so a call cannot be made without a session; the
	// Sessions subtest then checks only that such a call is not in
	// another's session.
	SessionlessCalls bool
	// MessageLimit: the transport has no size limit of its own for a
	// request (the engine still bounds a call's arguments).
	MessageLimit bool
}

// Code is how a surface's protocol classified an error, in the suite's
// terms: the engine's codes (engine.Code) and Unauthenticated.
type Code int

// The codes a Surface reports.
const (
	OK Code = iota
	Canceled
	InvalidArgument
	DeadlineExceeded
	ResourceExhausted
	Unavailable
	Unauthenticated
	Internal
	Unknown
	NotFound
	PermissionDenied
	Aborted
)

var codeNames = [...]string{"OK", "Canceled", "InvalidArgument", "DeadlineExceeded", "ResourceExhausted", "Unavailable", "Unauthenticated", "Internal", "Unknown", "NotFound", "PermissionDenied", "Aborted"}

// Handles is what a surface offers on batches by their ID (AttachBatch,
// GetBatch, CancelBatch). A Surface whose adapter implements it runs the
// Handles subtests; one that does not (a protocol without batches) skips
// them.
type Handles interface {
	// Start sends req as caller and returns its first event once it has
	// arrived; stop ends the request (as a client that goes away) and
	// returns the events read after the first and the error that ended it.
	Start(ctx context.Context, caller Caller, req *toolwirev1.ExecuteBatchRequest) (first *toolwirev1.ExecuteBatchResponse, stop func() ([]*toolwirev1.ExecuteBatchResponse, error), err error)
	// Attach reads the batch's events after afterSeq as caller, to the
	// batch's end, and returns them with the error that ended the request.
	Attach(ctx context.Context, caller Caller, batchID string, afterSeq uint64) ([]*toolwirev1.ExecuteBatchResponse, error)
	// Get returns the batch's state as caller.
	Get(ctx context.Context, caller Caller, batchID string) (*toolwirev1.GetBatchResponse, error)
	// CancelBatch cancels the batch as caller, with reason.
	CancelBatch(ctx context.Context, caller Caller, batchID, reason string) error
}

func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// The suite's limits, which the surface's transport takes from the engine's
// Config where it has its own (MaxMessageBytes).
const (
	maxCalls       = 8
	maxArgBytes    = 16 << 10
	maxMsgBytes    = 128 << 10
	maxResultBytes = 2000
	deadlineMargin = 3 * time.Second // what a loaded machine (load 15 and more, under -race) needs to send a result in time
	abandonGrace   = 100 * time.Millisecond
)

// The suite's callers: bob may not call "secret".
var (
	alice    = Caller{Name: "alice", Token: "alice-token"}
	bob      = Caller{Name: "bob", Token: "bob-token"}
	nobody   = Caller{}
	impostor = Caller{Name: "mallory", Token: "not-a-token"}
)

type kind = toolwirev1.ErrorKind

const (
	kindNone         = toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED
	kindUnknown      = toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL
	kindInvalidArgs  = toolwirev1.ErrorKind_ERROR_KIND_INVALID_ARGUMENTS
	kindToolError    = toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR
	kindTimeout      = toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT
	kindNotPermitted = toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED
	kindConflict     = toolwirev1.ErrorKind_ERROR_KIND_IDEMPOTENCY_CONFLICT
)

// Run runs the suite against surfaces made by newSurface, a new engine,
// registry and surface for each subtest. newSurface registers the
// surface's shutdown with t.Cleanup.
func Run(t *testing.T, newSurface func(t *testing.T, cfg Config) Surface) {
	for _, st := range subtests {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			st.run(t, start(t, newSurface))
		})
	}
}

var subtests = []struct {
	name string
	run  func(*testing.T, *env)
}{
	{"ListTools", listTools},
	{"Unauthenticated", unauthenticated},
	{"Batch/EveryCallGetsOneResultAndFinishedComesLast", everyCallOneResult},
	{"Batch/Lanes", lanes},
	{"Cancel/Batch", cancelBatch},
	{"Cancel/Call", cancelCall},
	{"Deadlines/CallTimeout", callTimeout},
	{"Deadlines/CallersDeadline", callersDeadline},
	{"Deadlines/ToolIgnoringCancellationIsAbandoned", abandoned},
	{"Bounds/TooManyCalls", tooManyCalls},
	{"Bounds/ArgumentsTooLarge", argumentsTooLarge},
	{"Bounds/RequestOverTheMessageLimit", overMessageLimit},
	{"Bounds/ResultIsCapped", resultCapped},
	{"Permissions", permissions},
	{"Idempotency/RepeatedKeyReplays", idempotentReplay},
	{"Idempotency/SameKeyOtherArgumentsConflicts", idempotentConflict},
	{"Idempotency/KeysAreScopedByCaller", idempotentByCaller},
	{"UnknownTool", unknownTool},
	{"BadArguments", badArguments},
	{"ToolErrorsAndPanics", toolErrors},
	{"Sessions", sessions},
	{"Handles/DetachedBatchOutlivesItsRequest", detachedBatch},
	{"Handles/LongBatchIDIsInvalid", longBatchID},
	{"Lists/Pages", listPages},
	{"Lists/PagesOfOneRevision", pagesOfOneRevision},
	{"Lists/Search", searchTools},
}

// env is one subtest's engine, tools and surface.
type env struct {
	s     Surface
	e     *engine.Engine
	reg   *tools.Registry
	tools *toolState
	lacks Lacks
}

func start(t *testing.T, newSurface func(t *testing.T, cfg Config) Surface) *env {
	t.Helper()
	st := &toolState{runs: map[int]int{}}
	reg, err := tools.NewRegistry(st.tools()...)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(engine.Config{
		MaxCallsPerBatch: maxCalls,
		MaxArgumentBytes: maxArgBytes,
		MaxMessageBytes:  maxMsgBytes,
		MaxResultBytes:   maxResultBytes,
		DeadlineMargin:   deadlineMargin,
		AbandonGrace:     abandonGrace,
		DrainTimeout:     time.Second,
	}, engine.Deps{
		Admission: permitFunc(func(caller, tool string) bool { return caller != bob.Name || tool != "secret" }),
		Logger:    slog.New(slog.DiscardHandler),
	})
	// Registered first, so it runs after the surface's own cleanup.
	t.Cleanup(func() {
		// A tool abandoned for ignoring its cancellation holds its slot
		// until it returns, which it does within a second.
		waitFor(t, func() bool { return e.Stats().CallsRunning == 0 })
		e.Close()
	})
	s := newSurface(t, Config{Engine: e, Registry: reg, Callers: []Caller{alice, bob}})
	return &env{s: s, e: e, reg: reg, tools: st, lacks: s.Lacks()}
}

// skipIf skips the subtest when the surface lacks what it needs, naming
// the field of Lacks that says so.
func skipIf(t *testing.T, lacks bool, field string) {
	t.Helper()
	if lacks {
		t.Skipf("the surface's adapter says Lacks.%s", field)
	}
}

type permitFunc func(caller, tool string) bool

func (f permitFunc) Permitted(caller *engine.Identity, tool string) bool { return f(caller.ID, tool) }

func (permitFunc) Decide(context.Context, *engine.Identity, *tools.Tool, json.RawMessage) engine.Verdict {
	return engine.Verdict{}
}

// call runs c as caller without a session, failing the test on an error or
// a missing result.
func (v *env) call(t *testing.T, caller Caller, c *toolwirev1.ToolCall) *toolwirev1.CallResult {
	t.Helper()
	r, err := v.s.Call(context.Background(), caller, "", c)
	if err != nil {
		t.Fatalf("Call(%s) as %q: %v (%v)", c.GetName(), caller.Name, err, v.s.Code(err))
	}
	if r == nil {
		t.Fatalf("Call(%s) as %q: no result", c.GetName(), caller.Name)
	}
	return r
}

// wantKind checks that r is a result of kind whose text holds each of
// texts; a surface that lacks error kinds is checked by is_error alone.
func (v *env) wantKind(t *testing.T, what string, r *toolwirev1.CallResult, want kind, texts ...string) {
	t.Helper()
	if !v.lacks.ErrorKinds && r.GetErrorKind() != want {
		t.Errorf("%s: kind %v (%.300q), want %v", what, r.GetErrorKind(), text(r), want)
	}
	if r.GetIsError() != (want != kindNone) {
		t.Errorf("%s: is_error %v (%.300q), want %v", what, r.GetIsError(), text(r), want != kindNone)
	}
	for _, w := range texts {
		if !strings.Contains(text(r), w) {
			t.Errorf("%s: text %.300q does not contain %q", what, text(r), w)
		}
	}
}

func listTools(t *testing.T, v *env) {
	names := func(caller Caller) map[string]*toolwirev1.Tool {
		got, err := v.s.Tools(context.Background(), caller)
		if err != nil {
			t.Fatalf("Tools as %q: %v", caller.Name, err)
		}
		var order []string
		byName := map[string]*toolwirev1.Tool{}
		for _, tl := range got {
			order = append(order, tl.GetName())
			byName[tl.GetName()] = tl
		}
		if !slices.IsSorted(order) {
			t.Errorf("Tools as %q: %v, not sorted", caller.Name, order)
		}
		return byName
	}
	all := names(alice)
	for _, want := range toolNames {
		if all[want] == nil {
			t.Errorf("alice's listing lacks %q", want)
		}
	}
	if echo := all["echo"]; !echo.GetAnnotations().GetReadOnly() || !strings.Contains(echo.GetInputSchema(), `"text"`) {
		t.Errorf("echo's declaration %v; want read_only and its input schema", echo)
	}
	if all["sleep"].GetAnnotations().GetReadOnly() {
		t.Error("sleep is listed as read_only")
	}
	if got := names(bob); got["secret"] != nil || got["echo"] == nil {
		t.Errorf("bob's listing has secret: %v, echo: %v; want only what he may call", got["secret"] != nil, got["echo"] != nil)
	}
}

func unauthenticated(t *testing.T, v *env) {
	for _, c := range []Caller{nobody, impostor} {
		who := "no credentials"
		if c.Token != "" {
			who = "a wrong token"
		}
		if _, err := v.s.Tools(context.Background(), c); v.s.Code(err) != Unauthenticated {
			t.Errorf("Tools with %s: %v (%v), want Unauthenticated", who, err, v.s.Code(err))
		}
		if _, err := v.s.Call(context.Background(), c, "", bump("a", 1)); v.s.Code(err) != Unauthenticated {
			t.Errorf("Call with %s: %v (%v), want Unauthenticated", who, err, v.s.Code(err))
		}
		if !v.lacks.Batches {
			events, err := v.s.Batch(context.Background(), c, batch(bump("a", 1)))
			if v.s.Code(err) != Unauthenticated || len(events) != 0 {
				t.Errorf("Batch with %s: %v (%v) after %d events, want Unauthenticated before any", who, err, v.s.Code(err), len(events))
			}
		}
	}
	if n := v.tools.runsOf(1); n != 0 {
		t.Errorf("a refused caller's call ran %d times", n)
	}
}

func everyCallOneResult(t *testing.T, v *env) {
	skipIf(t, v.lacks.Batches, "Batches")
	req := batch(
		call("a", "echo", `{"text":"hi"}`),
		call("b", "read", `{"ms":100,"report":true}`),
		call("c", "nope", `{}`),
		call("d", "strict", `{}`),
		call("e", "fail", `{"message":"bad"}`),
		call("f", "boom", ``),
		call("g", "sleep", `{"ms":1}`),
		bump("h", 1),
	)
	events, err := v.s.Batch(context.Background(), alice, req)
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	if len(events) < 2 || events[0].GetAccepted().GetBatchId() == "" {
		t.Fatalf("first of %d events is not BatchAccepted with a batch ID", len(events))
	}
	last := events[len(events)-1].GetFinished()
	if last == nil {
		t.Fatalf("last event = %v, want BatchFinished", events[len(events)-1])
	}
	want := map[string]kind{
		"a": kindNone, "b": kindNone, "c": kindUnknown, "d": kindInvalidArgs,
		"e": kindToolError, "f": kindToolError, "g": kindNone, "h": kindNone,
	}
	got := map[string]*toolwirev1.CallResult{}
	for _, ev := range events {
		var id string
		var idx uint32
		switch e := ev.GetEvent().(type) {
		case *toolwirev1.ExecuteBatchResponse_Started:
			id, idx = e.Started.GetCallId(), e.Started.GetIndex()
		case *toolwirev1.ExecuteBatchResponse_Progress:
			id, idx = e.Progress.GetCallId(), e.Progress.GetIndex()
		case *toolwirev1.ExecuteBatchResponse_Result:
			id, idx = e.Result.GetCallId(), e.Result.GetIndex()
		default:
			continue
		}
		if got[id] != nil {
			t.Errorf("an event of call %q after its result: %v", id, ev)
		}
		if int(idx) >= len(req.GetCalls()) || req.GetCalls()[idx].GetCallId() != id {
			t.Errorf("event %v: index %d does not name call %q", ev, idx, id)
		}
		if r := ev.GetResult(); r != nil {
			got[id] = r
		}
	}
	if len(got) != len(req.GetCalls()) {
		t.Errorf("%d calls have results, want all %d", len(got), len(req.GetCalls()))
	}
	for i, c := range req.GetCalls() {
		r := got[c.GetCallId()]
		if r == nil {
			continue
		}
		if r.GetIndex() != uint32(i) || r.GetToolName() != c.GetName() {
			t.Errorf("result %q: index %d tool %q, want %d %q", c.GetCallId(), r.GetIndex(), r.GetToolName(), i, c.GetName())
		}
		v.wantKind(t, "call "+c.GetCallId(), r, want[c.GetCallId()])
	}
	if last.GetBatchId() != events[0].GetAccepted().GetBatchId() || last.GetSucceeded() != 4 || last.GetFailed() != 4 {
		t.Errorf("BatchFinished %v; want batch %q, 4 succeeded, 4 failed", last, events[0].GetAccepted().GetBatchId())
	}
}

func lanes(t *testing.T, v *env) {
	skipIf(t, v.lacks.Batches, "Batches")
	req := batch(
		call("r1", "read", `{"ms":150}`), call("r2", "read", `{"ms":150}`), call("r3", "read", `{"ms":150}`),
		call("w", "sleep", `{"ms":10}`),
		call("r4", "read", `{"ms":10}`),
	)
	events, err := v.s.Batch(context.Background(), alice, req)
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	var plan []string
	for _, l := range events[0].GetAccepted().GetLanes() {
		plan = append(plan, fmt.Sprintf("%s parallel=%v", strings.Join(l.GetCallIds(), "+"), l.GetParallel()))
	}
	if want := []string{"r1+r2+r3 parallel=true", "w parallel=false", "r4 parallel=true"}; !slices.Equal(plan, want) {
		t.Errorf("lane plan %q, want %q", plan, want)
	}
	if p := v.tools.peak.Load(); p != 3 {
		t.Errorf("peak concurrency %d, want 3 (the three reads at once)", p)
	}
	log := v.tools.entries()
	pos := func(s string) int { return slices.Index(log, s) }
	for _, r := range []string{"r1", "r2", "r3"} {
		if pos("end "+r) < 0 || pos("end "+r) > pos("start w") {
			t.Errorf("the write started before %s ended: %v", r, log)
		}
	}
	if pos("end w") < 0 || pos("end w") > pos("start r4") {
		t.Errorf("r4 started before the write ended: %v", log)
	}
	// Results carry their batch index, so batch order can be restored
	// whatever order they arrived in.
	for _, ev := range events {
		if r := ev.GetResult(); r != nil && req.GetCalls()[r.GetIndex()].GetCallId() != r.GetCallId() {
			t.Errorf("result of %q carries index %d", r.GetCallId(), r.GetIndex())
		}
	}
}

func cancelBatch(t *testing.T, v *env) {
	skipIf(t, v.lacks.Batches, "Batches")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := v.s.Batch(ctx, alice, batch(call("a", "sleep", `{"ms":60000}`), call("b", "sleep", `{"ms":1}`)))
		done <- err
	}()
	waitFor(t, func() bool { return v.tools.saw("start a") })
	cancel()
	waitFor(t, func() bool { return v.tools.saw("cancelled a") })
	if err := <-done; v.s.Code(err) != Canceled {
		t.Errorf("Batch after its cancellation: %v (%v), want Canceled", err, v.s.Code(err))
	}
	// Once the engine is done with the batch, b has not started.
	waitFor(t, func() bool { return v.e.Stats().Batches == 0 })
	if v.tools.saw("start b") {
		t.Errorf("call b started after the caller cancelled: %v", v.tools.entries())
	}
}

func cancelCall(t *testing.T, v *env) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := v.s.Call(ctx, alice, "", call("a", "sleep", `{"ms":60000}`))
		done <- err
	}()
	waitFor(t, func() bool { return v.tools.saw("start a") })
	cancel()
	waitFor(t, func() bool { return v.tools.saw("cancelled a") })
	if err := <-done; v.s.Code(err) != Canceled {
		t.Errorf("Call after its cancellation: %v (%v), want Canceled", err, v.s.Code(err))
	}
}

func callTimeout(t *testing.T, v *env) {
	skipIf(t, v.lacks.CallTimeouts, "CallTimeouts")
	c := call("x", "sleep", `{"ms":60000}`)
	c.Timeout = durationpb.New(50 * time.Millisecond)
	v.wantKind(t, "a call past its timeout", v.call(t, alice, c), kindTimeout, "timed out after 50ms")
}

func callersDeadline(t *testing.T, v *env) {
	skipIf(t, v.lacks.Deadlines, "Deadlines")
	ctx, cancel := context.WithTimeout(context.Background(), 2*deadlineMargin)
	defer cancel()
	r, err := v.s.Call(ctx, alice, "", call("x", "sleep", `{"ms":60000}`))
	if err != nil {
		t.Fatalf("Call: %v (the result must arrive before the caller's deadline)", err)
	}
	v.wantKind(t, "a call past the caller's deadline", r, kindTimeout, "the client's deadline")
}

func abandoned(t *testing.T, v *env) {
	skipIf(t, v.lacks.CallTimeouts, "CallTimeouts")
	c := call("x", "stubborn", `{"ms":1000}`)
	c.Timeout = durationpb.New(30 * time.Millisecond)
	// The result says the tool was abandoned: it came before the tool
	// returned.
	v.wantKind(t, "a tool ignoring its cancellation", v.call(t, alice, c), kindTimeout, "abandoned")
	// The surface goes on serving.
	v.wantKind(t, "a call after it", v.call(t, alice, call("y", "echo", `{"text":"next"}`)), kindNone, "next")
}

func tooManyCalls(t *testing.T, v *env) {
	skipIf(t, v.lacks.Batches, "Batches")
	var cs []*toolwirev1.ToolCall
	for i := range maxCalls + 1 {
		cs = append(cs, bump(fmt.Sprint(i), 1))
	}
	events, err := v.s.Batch(context.Background(), alice, batch(cs...))
	if v.s.Code(err) != InvalidArgument || len(events) != 0 {
		t.Errorf("a batch of %d calls, the limit %d: %v (%v) after %d events, want InvalidArgument before any", maxCalls+1, maxCalls, err, v.s.Code(err), len(events))
	}
	if n := v.tools.runsOf(1); n != 0 {
		t.Errorf("a refused batch ran %d calls", n)
	}
}

func argumentsTooLarge(t *testing.T, v *env) {
	args := fmt.Sprintf(`{"n":1,"pad":%q}`, strings.Repeat("x", maxArgBytes))
	_, err := v.s.Call(context.Background(), alice, "", call("a", "bump", args))
	if v.s.Code(err) != InvalidArgument {
		t.Errorf("arguments over the %d-byte limit: %v (%v), want InvalidArgument", maxArgBytes, err, v.s.Code(err))
	}
	if n := v.tools.runsOf(1); n != 0 {
		t.Errorf("the refused call ran %d times", n)
	}
}

func overMessageLimit(t *testing.T, v *env) {
	skipIf(t, v.lacks.MessageLimit, "MessageLimit")
	args := fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", maxMsgBytes))
	if _, err := v.s.Call(context.Background(), alice, "", call("a", "echo", args)); v.s.Code(err) != ResourceExhausted {
		t.Errorf("a request over the %d-byte message limit: %v (%v), want ResourceExhausted", maxMsgBytes, err, v.s.Code(err))
	}
	v.wantKind(t, "a call after it", v.call(t, alice, call("b", "echo", `{"text":"small"}`)), kindNone, "small")
}

func resultCapped(t *testing.T, v *env) {
	r := v.call(t, alice, call("a", "echo", fmt.Sprintf(`{"text":%q}`, strings.Repeat("y", 3*maxResultBytes))))
	v.wantKind(t, "a result over the cap", r, kindNone, "[output truncated")
	if n := len(text(r)); n > maxResultBytes+300 {
		t.Errorf("a result of %d bytes of text; want at most the %d-byte cap and a marker", n, maxResultBytes)
	}
}

func permissions(t *testing.T, v *env) {
	v.wantKind(t, "bob's call of secret", v.call(t, bob, call("a", "secret", `{}`)), kindNotPermitted, "not permitted")
	if v.tools.saw("secret") {
		t.Error("a call its caller may not make ran")
	}
	v.wantKind(t, "alice's call of secret", v.call(t, alice, call("b", "secret", `{}`)), kindNone, "secret ran")
	// The unknown tool's answer lists what the caller may call, nothing else.
	r := v.call(t, bob, call("c", "nope", `{}`))
	v.wantKind(t, "bob's call of an unknown tool", r, kindUnknown, "echo")
	if strings.Contains(text(r), "secret") {
		t.Errorf("bob is told of secret: %q", text(r))
	}
}

func idempotentReplay(t *testing.T, v *env) {
	skipIf(t, v.lacks.IdempotencyKeys, "IdempotencyKeys")
	first := v.call(t, alice, keyed(bump("a", 1), "k1"))
	v.wantKind(t, "the first call", first, kindNone, "run 1")
	// The same call again, its arguments' keys in another order.
	again := v.call(t, alice, keyed(call("b", "bump", ` { "n" : 1 } `), "k1"))
	v.wantKind(t, "the call again", again, kindNone, "run 1")
	if !v.lacks.Replayed && (first.GetReplayed() || !again.GetReplayed()) {
		t.Errorf("replayed: first %v, again %v; want false, true", first.GetReplayed(), again.GetReplayed())
	}
	if n := v.tools.runsOf(1); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}

func idempotentConflict(t *testing.T, v *env) {
	skipIf(t, v.lacks.IdempotencyKeys, "IdempotencyKeys")
	v.call(t, alice, keyed(bump("a", 1), "k"))
	r := v.call(t, alice, keyed(bump("b", 2), "k"))
	v.wantKind(t, "the same key with other arguments", r, kindConflict, `"k"`)
	if n := v.tools.runsOf(2); n != 0 {
		t.Errorf("the conflicting call ran %d times", n)
	}
}

func idempotentByCaller(t *testing.T, v *env) {
	skipIf(t, v.lacks.IdempotencyKeys, "IdempotencyKeys")
	v.call(t, alice, keyed(bump("a", 1), "k"))
	r := v.call(t, bob, keyed(bump("a", 1), "k"))
	v.wantKind(t, "bob's call with alice's key", r, kindNone, "run 2")
	if r.GetReplayed() {
		t.Error("bob got alice's result")
	}
}

func unknownTool(t *testing.T, v *env) {
	r := v.call(t, alice, call("x", "ech", `{}`))
	v.wantKind(t, "a misspelt tool", r, kindUnknown, `unknown tool "ech"`, "echo", "sleep", "strict")
	r = v.call(t, alice, call("y", "multi_tool_use.parallel", `{"tool_uses":[{"recipient_name":"functions.bump","parameters":{"n":1}}]}`))
	v.wantKind(t, "a wrapper of calls", r, kindUnknown, "not a tool", "Nothing was run")
	if n := v.tools.runsOf(1); n != 0 {
		t.Errorf("the wrapped call ran %d times", n)
	}
}

func badArguments(t *testing.T, v *env) {
	for _, tt := range []struct {
		args string
		text bool // only text can carry it
		want []string
	}{
		{`{}`, false, []string{"missing property 'path'"}},
		{`{"path":"a","count":"many"}`, false, []string{"/count", "want integer"}},
		{`{"path":"a","count":0}`, false, []string{"/count", "minimum"}},
		{`{"path":"a","extra":1}`, false, []string{"extra"}},
		{`["a"]`, true, []string{"must be a JSON object"}},
		{`{"path":`, true, []string{"not valid JSON"}},
	} {
		if tt.text && v.lacks.ArgumentText {
			continue // the surface's protocol cannot carry these arguments
		}
		v.wantKind(t, "strict with "+tt.args, v.call(t, alice, call("x", "strict", tt.args)), kindInvalidArgs, tt.want...)
	}
	if v.tools.saw("strict") {
		t.Error("a call with bad arguments ran")
	}
	v.wantKind(t, "strict with good arguments", v.call(t, alice, call("y", "strict", `{"path":"a","count":2}`)), kindNone, "a×2")
}

func toolErrors(t *testing.T, v *env) {
	v.wantKind(t, "a tool's error", v.call(t, alice, call("a", "fail", `{"message":"disk full"}`)), kindToolError, "disk full")
	r := v.call(t, alice, call("b", "boom", `{}`))
	v.wantKind(t, "a panic", r, kindToolError, "panic: kaboom")
	if strings.Contains(text(r), "goroutine") {
		t.Errorf("the result leaks a stack trace: %q", text(r))
	}
}

func sessions(t *testing.T, v *env) {
	skipIf(t, v.lacks.Sessions, "Sessions")
	r, err := v.s.Call(context.Background(), alice, "s1", call("a", "whoami", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	v.wantKind(t, "a call in session s1", r, kindNone)
	if got := text(r); got != "alice in s1" {
		t.Errorf("the tool saw %q, want alice in s1", got)
	}
	got := text(v.call(t, bob, call("b", "whoami", `{}`)))
	if v.lacks.SessionlessCalls {
		if !strings.HasPrefix(got, "bob in ") || got == "bob in s1" {
			t.Errorf("without a session the tool saw %q, want bob in a session of his own", got)
		}
		return
	}
	if got != "bob in " {
		t.Errorf("without a session the tool saw %q, want bob in no session", got)
	}
}

func call(id, name, args string) *toolwirev1.ToolCall {
	return &toolwirev1.ToolCall{CallId: id, Name: name, Arguments: args}
}

func bump(id string, n int) *toolwirev1.ToolCall {
	return call(id, "bump", fmt.Sprintf(`{"n":%d}`, n))
}

func keyed(c *toolwirev1.ToolCall, key string) *toolwirev1.ToolCall {
	c.IdempotencyKey = key
	return c
}

func batch(cs ...*toolwirev1.ToolCall) *toolwirev1.ExecuteBatchRequest {
	return &toolwirev1.ExecuteBatchRequest{Calls: cs}
}

// text is a result's text blocks, joined.
func text(r *toolwirev1.CallResult) string {
	var b strings.Builder
	for _, c := range r.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// waitFor waits for cond to hold, failing the test just before its own
// deadline (as store/storetest's Bound): what it waits for must happen,
// and a fixed bound (it was 10s) is one a loaded machine can outlast.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	ctx, cancel := storetest.Bound(tb)
	defer cancel()
	for !cond() {
		if ctx.Err() != nil {
			tb.Fatal("condition not met by the test's deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// toolNames are the suite's tools.
var toolNames = []string{"boom", "bump", "echo", "fail", "read", "secret", "sleep", "strict", "stubborn", "whoami"}

// toolState is what the suite's tools tell the subtests.
type toolState struct {
	mu      sync.Mutex
	log     []string // "start id", "end id", "cancelled id", and the names of tools that must not run
	runs    map[int]int
	running atomic.Int32
	peak    atomic.Int32
}

func (st *toolState) record(s string) {
	st.mu.Lock()
	st.log = append(st.log, s)
	st.mu.Unlock()
}

func (st *toolState) saw(s string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Contains(st.log, s)
}

func (st *toolState) entries() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.log)
}

func (st *toolState) runsOf(n int) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.runs[n]
}

// tools returns the suite's tools.
func (st *toolState) tools() []tools.Tool {
	// wait waits ms milliseconds unless cancelled, recording its start, end
	// or cancellation and how many run at once, and reporting progress
	// every 20ms when it is asked to: a quiet one learns of its
	// cancellation only through its context.
	wait := func(ctx context.Context, c *tools.Call) (*tools.Result, error) {
		var a struct {
			MS     int
			Report bool
		}
		_ = json.Unmarshal(c.Arguments, &a)
		n := st.running.Add(1)
		defer st.running.Add(-1)
		for p := st.peak.Load(); n > p && !st.peak.CompareAndSwap(p, n); p = st.peak.Load() {
		}
		st.record("start " + c.ID)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		end := time.After(time.Duration(a.MS) * time.Millisecond)
		for {
			select {
			case <-end:
				st.record("end " + c.ID)
				return tools.Text("waited"), nil
			case <-tick.C:
				if a.Report {
					c.Progressf(1, 2, "waiting")
				}
			case <-ctx.Done():
				st.record("cancelled " + c.ID)
				return nil, ctx.Err()
			}
		}
	}
	msSchema := json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0},"report":{"type":"boolean"}},"required":["ms"]}`)
	return []tools.Tool{
		{Name: "echo", Description: "returns its text", Annotations: tools.Annotations{ReadOnly: true},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
				var a struct{ Text string }
				if err := json.Unmarshal(c.Arguments, &a); err != nil {
					return nil, err
				}
				return tools.Text(a.Text), nil
			}},
		{Name: "read", Description: "waits ms milliseconds; read-only", InputSchema: msSchema, Annotations: tools.Annotations{ReadOnly: true}, Handler: wait},
		{Name: "sleep", Description: "waits ms milliseconds; not read-only", InputSchema: msSchema, Handler: wait},
		{Name: "fail", Description: "fails with its message",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`),
			Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
				var a struct{ Message string }
				_ = json.Unmarshal(c.Arguments, &a)
				return nil, fmt.Errorf("%s", a.Message)
			}},
		{Name: "boom", Description: "panics", Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			panic("kaboom")
		}},
		{Name: "stubborn", Description: "waits ms milliseconds, ignoring cancellation",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0}},"required":["ms"]}`),
			Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
				var a struct{ MS int }
				_ = json.Unmarshal(c.Arguments, &a)
				time.Sleep(time.Duration(a.MS) * time.Millisecond)
				st.record("end " + c.ID)
				return tools.Text("too late"), nil
			}},
		{Name: "strict", Description: "takes a path and a positive count, nothing else",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"count":{"type":"integer","minimum":1}},"required":["path"],"additionalProperties":false}`),
			Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
				st.record("strict")
				var a struct {
					Path  string
					Count int
				}
				_ = json.Unmarshal(c.Arguments, &a)
				return tools.Text(fmt.Sprintf("%s×%d", a.Path, a.Count)), nil
			}},
		{Name: "bump", Description: "counts its runs by n",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"pad":{"type":"string"}},"required":["n"]}`),
			Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
				var a struct{ N int }
				_ = json.Unmarshal(c.Arguments, &a)
				st.mu.Lock()
				st.runs[a.N]++
				run := st.runs[a.N]
				st.mu.Unlock()
				return tools.Text(fmt.Sprintf("n=%d run %d", a.N, run)), nil
			}},
		{Name: "secret", Description: "what bob may not call", Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
				st.record("secret")
				return tools.Text("secret ran"), nil
			}},
		{Name: "whoami", Description: "says who calls it, in which session", Annotations: tools.Annotations{ReadOnly: true},
			Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
				return tools.Text(c.Caller + " in " + c.SessionID), nil
			}},
	}
}

// longBatchID: a batch ID longer than any batch has (engine.MaxIDBytes) is
// refused InvalidArgument by GetBatch, AttachBatch and CancelBatch before
// it reaches the store, its message quoting only its start; one at the
// bound is looked up (NotFound).
func longBatchID(t *testing.T, v *env) {
	skipIf(t, v.lacks.Batches, "Batches")
	h, ok := v.s.(Handles)
	if !ok {
		t.Skip("the surface's adapter does not implement Handles")
	}
	bg := context.Background()
	for _, tt := range []struct {
		id   string
		want Code
	}{
		{strings.Repeat("b", engine.MaxIDBytes), NotFound},
		{strings.Repeat("b", engine.MaxIDBytes+1), InvalidArgument},
		{strings.Repeat("b", 64<<10), InvalidArgument},
	} {
		errs := map[string]error{}
		_, errs["GetBatch"] = h.Get(bg, alice, tt.id)
		_, errs["AttachBatch"] = h.Attach(bg, alice, tt.id, 0)
		errs["CancelBatch"] = h.CancelBatch(bg, alice, tt.id, "no")
		for rpc, err := range errs {
			if got := v.s.Code(err); got != tt.want {
				t.Errorf("%s of a batch ID of %d bytes: %v (%v), want %v", rpc, len(tt.id), err, got, tt.want)
			}
			if err != nil && len(err.Error()) > 1024 {
				t.Errorf("%s of a batch ID of %d bytes: an error of %d bytes, want the ID cut short", rpc, len(tt.id), len(err.Error()))
			}
		}
	}
}

// detachedBatch: a detached batch runs on when its request ends; its own
// caller finds it by ID (GetBatch, CancelBatch, AttachBatch from a seq),
// another caller does not.
func detachedBatch(t *testing.T, v *env) {
	skipIf(t, v.lacks.Batches, "Batches")
	h, ok := v.s.(Handles)
	if !ok {
		t.Skip("the surface's adapter does not implement Handles")
	}
	req := batch(call("a", "sleep", `{"ms":60000}`))
	req.Options = &toolwirev1.BatchOptions{Detach: true}
	first, stop, err := h.Start(context.Background(), alice, req)
	if err != nil {
		t.Fatalf("the detached batch: %v", err)
	}
	if first.GetAccepted() == nil || first.GetSeq() != 1 {
		t.Fatalf("the detached batch's first event %v, want BatchAccepted, seq 1", first)
	}
	id := first.GetAccepted().GetBatchId()
	waitFor(t, func() bool { return v.tools.saw("start a") })
	more, err := stop() // the client goes away
	if v.s.Code(err) != Canceled {
		t.Errorf("the detached batch's request after it was ended: %v (%v), want Canceled", err, v.s.Code(err))
	}
	for i, ev := range more {
		if ev.GetSeq() != uint64(i+2) {
			t.Errorf("event %d has seq %d", i+2, ev.GetSeq())
		}
	}
	bg := context.Background()
	if _, err := h.Get(bg, bob, id); v.s.Code(err) != NotFound {
		t.Errorf("GetBatch as bob: %v (%v), want NotFound", err, v.s.Code(err))
	}
	if _, err := h.Attach(bg, bob, id, 0); v.s.Code(err) != NotFound {
		t.Errorf("AttachBatch as bob: %v (%v), want NotFound", err, v.s.Code(err))
	}
	if err := h.CancelBatch(bg, bob, id, "no"); v.s.Code(err) != NotFound {
		t.Errorf("CancelBatch as bob: %v (%v), want NotFound", err, v.s.Code(err))
	}
	// The call has started; its CallStarted is stored by the batch's
	// writer soon after (seen at last_seq 1 on a loaded machine).
	var got *toolwirev1.GetBatchResponse
	waitFor(t, func() bool {
		got, err = h.Get(bg, alice, id)
		if err != nil {
			t.Fatalf("GetBatch: %v", err)
		}
		return got.GetLastSeq() >= 2
	})
	if got.GetState() != toolwirev1.BatchState_BATCH_STATE_RUNNING {
		t.Errorf("GetBatch after the request ended: %v, want RUNNING with the events so far", got)
	}
	if v.tools.saw("cancelled a") {
		t.Fatal("the detached batch's call was cancelled when its request ended")
	}
	if err := h.CancelBatch(bg, alice, id, "enough"); err != nil {
		t.Fatalf("CancelBatch: %v", err)
	}
	rest, err := h.Attach(bg, alice, id, 1)
	if err != nil {
		t.Fatalf("AttachBatch after 1: %v", err)
	}
	for i, ev := range rest {
		if ev.GetSeq() != uint64(i+2) {
			t.Errorf("attached event %d has seq %d, want %d", i, ev.GetSeq(), i+2)
		}
	}
	var res *toolwirev1.CallResult
	for _, ev := range rest {
		if r := ev.GetResult(); r != nil {
			res = r
		}
	}
	if res == nil || len(rest) == 0 || rest[len(rest)-1].GetFinished() == nil {
		t.Fatalf("AttachBatch after 1: %v, want a's result and BatchFinished last", rest)
	}
	v.wantKind(t, "the cancelled detached call", res, toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, "enough")
	if got, err := h.Get(bg, alice, id); err != nil || got.GetState() != toolwirev1.BatchState_BATCH_STATE_CANCELLED {
		t.Errorf("GetBatch after CancelBatch: %v %v, want CANCELLED", got.GetState(), err)
	}
}
