// Package tools defines what a tool is, the registry that holds the tools a
// server offers, and the validation of a call's arguments against a tool's
// input schema. The registry also records which source (sources/) owns each
// tool that is not built in, and settles names two owners offer. Built-in
// toolsets live in subpackages. tools and its subpackages must not import
// engine/, service/, sources/, store/, client/ or cmd/ (docs/architecture.md).
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Annotations are hints about a tool's behaviour, with the meaning MCP gives
// them. ReadOnly decides whether the tool's calls may share a parallel lane.
type Annotations struct {
	ReadOnly    bool // the tool does not change its environment
	Destructive bool // the tool may perform destructive updates
	Idempotent  bool // repeating a call with the same arguments has no further effect
	OpenWorld   bool // the tool reaches outside systems
}

// Source says where a tool's implementation lives.
type Source int

// Sources of tools.
const (
	SourceBuiltin Source = iota + 1
	SourceHTTP
	SourceMCP
	SourceRemote
)

// Name is the source's name as policies and the audit trail write it:
// "builtin" (also for 0), "http", "mcp", "remote", or "other".
func (s Source) Name() string {
	switch s {
	case SourceBuiltin, 0:
		return "builtin"
	case SourceHTTP:
		return "http"
	case SourceMCP:
		return "mcp"
	case SourceRemote:
		return "remote"
	}
	return "other"
}

// Handler runs one call. A returned error becomes a TOOL_ERROR result carrying
// the error's message; a Result with IsError set does the same with content of
// the tool's choosing. Handlers must honour ctx: when it is done the call's
// result has already been decided (cancelled or timed out).
type Handler func(ctx context.Context, call *Call) (*Result, error)

// Tool is one tool a server offers.
type Tool struct {
	Name         string          // unique; [A-Za-z0-9_.-]{1,128}
	Title        string          // short human-readable title
	Description  string          // model-facing description
	InputSchema  json.RawMessage // JSON Schema of the arguments; root type object
	OutputSchema json.RawMessage // optional JSON Schema of StructuredContent
	Annotations  Annotations
	Timeout      time.Duration // the longest one call may run; 0 means the server's limit
	Source       Source        // where the tool comes from; 0 means SourceBuiltin
	Handler      Handler
	// IdempotencyKey, when set, derives a key from a call's validated
	// arguments, for calls sent without an idempotency_key: a call whose key
	// completed before is replayed instead of run (see KeyFrom).
	IdempotencyKey func(args json.RawMessage) (key string, ok bool)

	// Compiled schemas, set when the tool is added to a registry (or by a
	// SchemaCache); the flat ones when the schema is simple enough for a
	// fast check (flat.go). inputSrc and outputSrc are the texts they were
	// compiled from, so a compiled tool added again is not compiled again.
	// outputLazy is an output schema left to be compiled at its first use
	// (SchemaCache.DeferOutput).
	input, output         *jsonschema.Schema
	inputFlat, outputFlat *flatSchema
	inputCaseNames        map[string]bool // the input schema's names declared in several cases (keys.go)
	inputCost, outputCost *costNode       // set when checking a value may multiply with its depth (checkcost.go)
	inputSrc, outputSrc   json.RawMessage
	outputLazy            *compiledSchema
}

// Upstream reports whether the tool's results are another system's
// answers (an HTTP API, an MCP server, a remote toolwire) rather than
// toolwire's own code: an upstream answer that does not match the output
// schema is still delivered, with the mismatch noted (NoteOutputMismatch),
// since the call may have done what it was asked (a 201 Created) and
// calling again would do it twice. A built-in tool's mismatch is a bug in
// toolwire, and an error result.
func (t *Tool) Upstream() bool {
	return t.Source != SourceBuiltin && t.Source != 0
}

// Call is the handle a Handler receives for one call: its identity, its
// validated arguments, and a way to report progress and stream output.
type Call struct {
	ID        string          // the model's call ID
	Name      string          // the tool's name
	Arguments json.RawMessage // validated JSON object
	SessionID string          // the batch's session, if any
	Caller    string          // the authenticated caller; "" when anonymous

	mu     sync.Mutex
	report func(Progress)

	approve func(ctx context.Context, reason string) error // see RequestApproval

	session Session // see Call.Session
}

// NewCall returns a call handle; report receives the call's progress events
// and may be nil. The server calls it; tests of a single tool may too.
func NewCall(id, name string, args json.RawMessage, report func(Progress)) *Call {
	return &Call{ID: id, Name: name, Arguments: args, report: report}
}

// SetApprover sets what RequestApproval asks: the server, which holds the
// call until a person answers (it finds the call from ctx); the server
// calls it.
func (c *Call) SetApprover(approve func(ctx context.Context, reason string) error) {
	c.approve = approve
}

// RequestApproval asks a person to approve what the call is about to do
// (a command outside an allow-list, say), telling them reason, and waits
// for the answer; the call holds no concurrency slot meanwhile. It returns
// nil once approved. Otherwise it returns an error the tool should return
// as it is: the call's result then says the call was denied (with the
// approver's message) or that no one approved in time. Without a server
// that can ask (a tool's own tests), or with a ctx not derived from the one
// the handler was given, it returns ErrNoApprover.
func (c *Call) RequestApproval(ctx context.Context, reason string) error {
	if c == nil || c.approve == nil {
		return ErrNoApprover
	}
	return c.approve(ctx, reason)
}

// ErrNoApprover is RequestApproval's error when nobody can be asked.
var ErrNoApprover = errors.New("approval was needed, but no one can be asked here")

// Progress is one progress report or chunk of streamed output.
type Progress struct {
	Progress *float64 // progress so far, in units the tool chooses
	Total    *float64 // total expected, if known
	Message  string   // human-readable status
	Output   string   // a chunk of streamed output
}

// Report sends a progress event. It blocks when the client reads slowly, so a
// chatty tool is slowed down rather than buffered without bound; it returns
// at once after the call has finished.
func (c *Call) Report(p Progress) {
	if c == nil {
		return
	}
	// Holding the lock while reporting orders every report before Close, so no
	// progress event can follow the call's result.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.report != nil {
		c.report(p)
	}
}

// Progressf reports progress out of total with a formatted message.
func (c *Call) Progressf(progress, total float64, format string, args ...any) {
	c.Report(Progress{Progress: &progress, Total: &total, Message: fmt.Sprintf(format, args...)})
}

// Output streams a chunk of output, such as a command's stdout.
func (c *Call) Output(chunk string) {
	c.Report(Progress{Output: chunk})
}

// Close stops further reports from reaching the server: it waits for a report
// in flight and drops later ones. The server calls it before sending the
// call's result.
func (c *Call) Close() {
	c.mu.Lock()
	c.report = nil
	c.mu.Unlock()
}

// Result is what a call returns.
type Result struct {
	Content           []Content       // blocks for the model
	StructuredContent json.RawMessage // optional JSON, checked against the output schema
	Details           json.RawMessage // optional JSON for user interfaces, never for the model
	IsError           bool            // the call failed; Content says why

	// ErrorKind classifies an error result with a toolwire.v1.ErrorKind
	// value; zero means TOOL_ERROR. Remote mounts set it to pass a remote
	// server's classification (such as TIMEOUT) through unchanged.
	ErrorKind int32
}

// Content is one block of a result: text, or an image when Data is set.
type Content struct {
	Text     string
	Data     []byte // image bytes
	MIMEType string // the image's MIME type
}

// Text returns a successful result with one text block.
func Text(s string) *Result {
	return &Result{Content: []Content{{Text: s}}}
}

// Errorf returns an error result with one text block, for failures the model
// should read and act on.
func Errorf(format string, args ...any) *Result {
	return &Result{Content: []Content{{Text: fmt.Sprintf(format, args...)}}, IsError: true}
}
