package mcpserve

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/writewatch"
)

// The _meta keys of a tools/call request that toolwire reads. Each is
// optional and, when present, a string.
const (
	// MetaSessionID is toolwire's session_id: it scopes session variables
	// and a per-session workspace, and orders the session's concurrent
	// calls (engine.Sequence). On 2025-11-25 a call without it belongs to
	// its MCP session (Mcp-Session-Id); on 2026-07-28, which has no
	// sessions, a call without it belongs to none and is not ordered.
	MetaSessionID = "toolwire.dev/session_id"
	// MetaIdempotencyKey is the call's idempotency_key: a retried call with
	// the same key replays the first one's result instead of running again.
	MetaIdempotencyKey = "toolwire.dev/idempotency_key"
	// MetaCallID is the call's call_id, as logs and traces show it; by
	// default "mcp-" and a number.
	MetaCallID = "toolwire.dev/call_id"
)

// The _meta keys of a tools/call result that toolwire writes.
const (
	// MetaErrorKind is an error result's error_kind (TOOL_ERROR,
	// INVALID_ARGUMENTS, UNKNOWN_TOOL, NOT_PERMITTED, TIMEOUT, CANCELLED,
	// IDEMPOTENCY_CONFLICT, INTERNAL; see the contract).
	MetaErrorKind = "toolwire.dev/error_kind"
	// MetaReplayed is true on a result replayed from the idempotency store.
	MetaReplayed = "toolwire.dev/replayed"
	// MetaTruncated is true on a result cut to max_result_bytes;
	// MetaOriginalSize is then its full size in bytes.
	MetaTruncated    = "toolwire.dev/truncated"
	MetaOriginalSize = "toolwire.dev/original_size"
	// MetaDetails is the result's details: JSON for user interfaces, never
	// for the model.
	MetaDetails = "toolwire.dev/details"
	// MetaOutput is, on a progress notification, a chunk of the tool's
	// streamed output (also its message when the tool gave none).
	MetaOutput = "toolwire.dev/output"
)

// callTool answers tools/call: one call on the path every call takes,
// ordered among its session's calls, with MCP progress and cancellation.
//
// MCP Tasks (task-augmented tools/call) is not offered: a task must
// outlive its request and be fetched from any replica, which needs
// durable batches (a batch's run split from its stream, its events in a
// store), not yet in the engine. The tasks capability is not declared, so
// clients send plain calls; the spec has a server without it answer a
// task-augmented call as a plain one, which is what happens here. When
// durable batches land, this is where a call with params.task starts a
// detached batch and answers with its task.
func (s *Server) callTool(ctx context.Context, req *mcp.CallToolRequest, name string) (*mcp.CallToolResult, error) {
	p := req.Params
	session, err := metaString(p.Meta, MetaSessionID)
	if err != nil {
		return nil, err
	}
	if session == "" && req.Session != nil && req.ProtocolVersion() < RevisionStateless {
		session = req.Session.ID()
	}
	key, err := metaString(p.Meta, MetaIdempotencyKey)
	if err != nil {
		return nil, err
	}
	callID, err := metaString(p.Meta, MetaCallID)
	if err != nil {
		return nil, err
	}
	if callID == "" {
		callID = "mcp-" + strconv.FormatUint(s.calls.Add(1), 10)
	}
	args := string(p.Arguments)
	if args == "null" {
		args = ""
	}

	var header http.Header
	if req.Extra != nil {
		header = req.Extra.Header
	}
	ctx = clientTrace(ctx, metaTrace(p.Meta), header)

	snap := s.reg.Snapshot()
	done, err := s.eng.Sequence(ctx, snap, session, name)
	if err != nil {
		return nil, rpcError(err)
	}
	defer done()
	sink := &callSink{ctx: ctx, session: req.Session, token: p.GetProgressToken()}
	batch := &toolwirev1.ExecuteBatchRequest{
		SessionId: session,
		Calls:     []*toolwirev1.ToolCall{{CallId: callID, Name: name, Arguments: args, IdempotencyKey: key}},
	}
	return s.run(ctx, snap, batch, sink, s.requestOf(req))
}

// metaString returns the string at key in m, "" when absent.
func metaString(m mcp.Meta, key string) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "_meta." + key + " must be a string"}
	}
	return s, nil
}

// callSink takes a call's events from Run: progress becomes MCP progress
// notifications (when the client sent a progress token), the result is
// kept for the response, or, when the call came through serve, handed to
// the handler, the Send returning once the response is written (see
// requests.go).
type callSink struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	last    float64 // the last progress sent, which MCP requires to grow
	sent    bool    // some progress was sent
	total   float64 // the last total reported
	result  *toolwirev1.CallResult

	handoff chan<- *mcp.CallToolResult // to the handler; nil: keep the result
	written <-chan struct{}            // closed once the response is done
	w       *writewatch.Writer         // the response

	// A call the fast path serves (fastcall.go) writes its progress and
	// its result to the response itself, answering id.
	stream *sseWriter
	id     jsonrpc.ID
}

// mcpWeight is what /mcp holds of a call's result while writing it, in
// its encoded size: the go-sdk keeps it as JSON three times (the result,
// the JSON-RPC message, the SSE event) besides the call's own result and
// arguments; measured with bench/stalled --surface mcp, a MiB of the
// engine's budget held about 5 MiB of heap when each counted once.
const mcpWeight = 5

// Weight makes the engine's budgets count what a stalled /mcp response
// really holds (engine.WeightedSink).
func (k *callSink) Weight() int { return mcpWeight }

func (k *callSink) Send(ev *toolwirev1.ExecuteBatchResponse) error {
	switch e := ev.GetEvent().(type) {
	case *toolwirev1.ExecuteBatchResponse_Result:
		k.result = e.Result
		if k.stream != nil {
			// Written while the engine's budget counts it, and ended by its
			// watchdog (k.w is the batch's Stopper) for a client that
			// stops reading.
			if err := k.stream.result(k.id, mcpResult(e.Result)); err != nil || k.w.Stopped() {
				return writewatch.ErrStopped
			}
			return nil
		}
		if k.handoff != nil {
			k.handoff <- mcpResult(e.Result)
			<-k.written
			if k.w.Stopped() {
				return writewatch.ErrStopped
			}
		}
	case *toolwirev1.ExecuteBatchResponse_Progress:
		if k.token == nil || (k.session == nil && k.stream == nil) {
			return nil
		}
		pr := e.Progress
		if pr.Total != nil {
			k.total = pr.GetTotal()
		}
		// A report without a total (an output chunk) keeps the last one.
		n := &mcp.ProgressNotificationParams{ProgressToken: k.token, Message: pr.GetMessage(), Total: k.total}
		// MCP's progress must grow with every notification: a report that
		// does not advance it (an output chunk, a repeated value) is sent
		// with the next representable value above the last.
		v := pr.GetProgress()
		if pr.Progress == nil {
			v = k.last
		}
		if k.sent && v <= k.last {
			v = math.Nextafter(k.last, math.Inf(1))
		}
		n.Progress, k.last, k.sent = v, v, true
		if out := pr.GetOutput(); out != "" {
			n.Meta = mcp.Meta{MetaOutput: out}
			if n.Message == "" {
				n.Message = out
			}
		}
		// Progress is best effort: a client that cannot take it still gets
		// the result, and a call is never failed for it.
		if k.stream != nil {
			_ = k.stream.progress(n)
			return nil
		}
		_ = k.session.NotifyProgress(k.ctx, n)
	}
	return nil
}

// mcpResult is a toolwire result as MCP has it: text and image blocks,
// structuredContent, isError, and toolwire's own fields in _meta.
func mcpResult(r *toolwirev1.CallResult) *mcp.CallToolResult {
	out := &mcp.CallToolResult{Content: make([]mcp.Content, 0, len(r.GetContent())), IsError: r.GetIsError()}
	for _, c := range r.GetContent() {
		switch b := c.GetBlock().(type) {
		case *toolwirev1.Content_Text:
			out.Content = append(out.Content, &mcp.TextContent{Text: b.Text.GetText()})
		case *toolwirev1.Content_Image:
			out.Content = append(out.Content, &mcp.ImageContent{Data: b.Image.GetData(), MIMEType: b.Image.GetMimeType()})
		}
	}
	if sc := r.GetStructuredContent(); sc != "" {
		out.StructuredContent = json.RawMessage(sc)
	}
	var meta mcp.Meta
	set := func(k string, v any) {
		if meta == nil {
			meta = mcp.Meta{}
		}
		meta[k] = v
	}
	if k := r.GetErrorKind(); k != toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED {
		set(MetaErrorKind, strings.TrimPrefix(k.String(), "ERROR_KIND_"))
	}
	if r.GetReplayed() {
		set(MetaReplayed, true)
	}
	if r.GetTruncated() {
		set(MetaTruncated, true)
		set(MetaOriginalSize, r.GetOriginalSize())
	}
	if d := r.GetDetails(); d != "" {
		set(MetaDetails, json.RawMessage(d))
	}
	out.Meta = meta
	return out
}

var _ engine.WeightedSink = (*callSink)(nil)
