package mcpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/writewatch"
	"go.opentelemetry.io/otel/propagation"
)

// A stateless tools/call (2026-07-28), the request an agent sends most,
// is answered here rather than by the go-sdk when it is plainly valid.
// For each such request the SDK connects a server session of its own (a
// JSON-RPC connection and its goroutines), decodes the body four times and
// its _meta three more (each decode allocating a 32 KiB buffer: about
// 270 KB per call), logs three lines, and hands the result across three
// goroutines before it is written; MCP in front of an MCP server cost 3.1–3.3×
// a direct stdio call, most of it there. Here the request is decoded
// once, the call runs on the engine as every call does (callTool's path),
// and its progress and result are written by the batch's writer straight
// to the response, as the SDK writes them: one SSE event each.
//
// Only what the SDK would accept as it is is answered here: a POST of one
// JSON-RPC request with the headers, the _meta and the parameters the
// SDK requires and nothing it would treat otherwise. Anything else (a
// malformed or unusual request, a refusal, another method, a batch,
// task-augmented or multi-round-trip calls, a _meta field of toolwire's
// that is not a string) goes to the SDK as before, which answers it, or
// refuses it, as it always did. TestFastCallAnswersAsTheSDK holds the two
// to the same bytes.

// maxFastBody bounds the body the fast path answers; a larger one goes to
// the SDK.
const maxFastBody = 1 << 20

// fastCall is a stateless tools/call as the fast path reads it.
type fastCall struct {
	id       jsonrpc.ID
	name     string
	args     string
	token    any // the progress token, nil when none
	session  string
	key      string
	callID   string
	protocol string
	trace    propagation.MapCarrier // the trace context in _meta, nil when none
}

// serveFast answers r, a request of revision version whose body is body
// (read, and checked, by readBody), when it is a plainly valid stateless
// tools/call, and reports whether it did.
func (s *Server) serveFast(w http.ResponseWriter, ww *writewatch.Writer, r *http.Request, version string, body []byte) bool {
	if s.sdkOnly || version != RevisionStateless || r.Method != http.MethodPost || !fastHeaders(r) || len(body) > maxFastBody {
		return false
	}
	c, ok := parseFastCall(body, version)
	if !ok || r.Header.Get("Mcp-Name") != c.name {
		return false
	}
	s.fast.Add(1)
	s.runFast(w, ww, r, c)
	return true
}

// fastHeaders reports whether r's headers are those the SDK serves a
// tools/call with as it is: JSON in, JSON and SSE accepted, the method in
// Mcp-Method, no Last-Event-ID, and a Host that its DNS rebinding check
// lets through.
func fastHeaders(r *http.Request) bool {
	h := r.Header
	if h.Get("Mcp-Method") != "tools/call" || h.Get("Mcp-Name") == "" || len(h.Values("Last-Event-ID")) > 0 {
		return false
	}
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	var jsonOK, sseOK bool
	for _, v := range h.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			jsonOK = jsonOK || mt == "application/json"
			sseOK = sseOK || mt == "text/event-stream"
		}
	}
	if !jsonOK || !sseOK {
		return false
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil && loopback(local.String()) && !loopback(r.Host) {
		return false // the SDK refuses it (403)
	}
	return true
}

// loopback reports whether hostport names the loopback interface.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.IsLoopback()
}

// parseFastCall reads body as a stateless tools/call of protocol version
// version, or reports false when anything in it is not as the fast path
// answers it.
func parseFastCall(body []byte, version string) (fastCall, bool) {
	var c fastCall
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || len(msg) != 4 || string(msg["jsonrpc"]) != `"2.0"` || string(msg["method"]) != `"tools/call"` {
		return c, false
	}
	id, ok := rpcID(msg["id"])
	if !ok {
		return c, false
	}
	c.id, c.protocol = id, version
	var params map[string]json.RawMessage
	if json.Unmarshal(msg["params"], &params) != nil {
		return c, false
	}
	for k := range params {
		if k != "name" && k != "arguments" && k != "_meta" {
			return c, false // task, inputResponses, requestState, …: the SDK's
		}
	}
	if json.Unmarshal(params["name"], &c.name) != nil || c.name == "" {
		return c, false
	}
	switch args := bytes.TrimSpace(params["arguments"]); {
	case len(args) == 0 || string(args) == "null":
	case args[0] == '{' && json.Valid(args):
		c.args = string(params["arguments"])
	default:
		return c, false
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(params["_meta"], &meta) != nil || meta == nil {
		return c, false
	}
	var v string
	if json.Unmarshal(meta[mcp.MetaKeyProtocolVersion], &v) != nil || v != version {
		return c, false
	}
	var caps struct {
		mcp.ClientCapabilities
		Roots *mcp.RootCapabilities `json:"roots,omitempty"`
	}
	if !strictJSON(meta[mcp.MetaKeyClientCapabilities], &caps) {
		return c, false
	}
	if info, ok := meta[mcp.MetaKeyClientInfo]; ok && !strictJSON(info, &mcp.Implementation{}) {
		return c, false
	}
	if level, ok := meta[mcp.MetaKeyLogLevel]; ok && json.Unmarshal(level, new(string)) != nil {
		return c, false
	}
	if tok, ok := meta["progressToken"]; ok {
		if c.token, ok = progressToken(tok); !ok {
			return c, false
		}
	}
	c.trace = traceMeta(meta)
	for key, to := range map[string]*string{MetaSessionID: &c.session, MetaIdempotencyKey: &c.key, MetaCallID: &c.callID} {
		if raw, ok := meta[key]; ok && string(raw) != "null" && json.Unmarshal(raw, to) != nil {
			return c, false // callTool's error, through the SDK
		}
	}
	return c, true
}

// rpcID is a JSON-RPC request ID (a string or an integer), as the SDK
// makes it.
func rpcID(raw json.RawMessage) (jsonrpc.ID, bool) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return jsonrpc.ID{}, false
	}
	switch v := v.(type) {
	case string:
		id, err := jsonrpc.MakeID(v)
		return id, err == nil
	case json.Number:
		n, err := v.Int64()
		if err != nil || n > maxExactID || n < -maxExactID { // the SDK reads a float64 (ids.go)
			return jsonrpc.ID{}, false
		}
		id, err := jsonrpc.MakeID(float64(n))
		return id, err == nil
	}
	return jsonrpc.ID{}, false
}

// progressToken is a progress token (a string or an integer) as the SDK
// hands it to a handler.
func progressToken(raw json.RawMessage) (any, bool) {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return nil, false
	}
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		n, err := v.Int64()
		if err != nil || n > maxExactID || n < -maxExactID { // the SDK reads a float64 (ids.go)
			return nil, false
		}
		return float64(n), true
	}
	return nil, false
}

// strictJSON decodes raw, a JSON object, into v, reporting false when it
// is absent, not an object, or has a field v does not know or of another
// type: what the SDK might read otherwise goes to it.
func strictJSON(raw json.RawMessage, v any) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v) == nil && !d.More()
}

// runFast runs c, the call of request r, and writes its progress and its
// result (or the engine's refusal) to w as the SDK's stateless handler
// does: SSE events of JSON-RPC messages, or, for the errors MCP gives an
// HTTP status, that status and the error alone.
func (s *Server) runFast(w http.ResponseWriter, ww *writewatch.Writer, r *http.Request, c fastCall) {
	ctx := clientTrace(r.Context(), c.trace, r.Header) // the request is the call: a client that goes away cancels it
	if c.callID == "" {
		c.callID = "mcp-" + strconv.FormatUint(s.calls.Add(1), 10)
	}
	snap := s.reg.Snapshot()
	done, err := s.eng.Sequence(ctx, snap, c.session, c.name)
	if err != nil {
		writeFastError(w, c.id, rpcError(err))
		return
	}
	defer done()
	out := &sseWriter{w: w, server: s.impl}
	sink := &callSink{ctx: ctx, token: c.token, stream: out, id: c.id, w: ww}
	batch := &toolwirev1.ExecuteBatchRequest{
		SessionId: c.session,
		Calls:     []*toolwirev1.ToolCall{{CallId: c.callID, Name: c.name, Arguments: c.args, IdempotencyKey: c.key}},
	}
	release := ww.Engage()
	defer release()
	err = s.eng.Run(context.WithValue(ctx, engine.StopperKey{}, ww), snap, batch, sink)
	switch {
	case sink.result != nil:
	case err != nil:
		writeFastError(w, c.id, rpcError(err))
	default:
		writeFastError(w, c.id, rpcError(&engine.Error{Code: engine.Internal, Message: "the call ended without a result"}))
	}
}

// writeFastError writes the JSON-RPC error e answering id, as the SDK's
// stateless handler writes a handler's error: the codes MCP gives an HTTP
// status (SEP-2575) alone with that status, the rest as an SSE event.
func writeFastError(w http.ResponseWriter, id jsonrpc.ID, e error) {
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: e})
	if err != nil {
		return
	}
	status := 0
	if je, ok := e.(*jsonrpc.Error); ok {
		switch je.Code {
		case jsonrpc.CodeMethodNotFound:
			status = http.StatusNotFound
		case jsonrpc.CodeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
			status = http.StatusBadRequest
		}
	}
	if status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(data)
		return
	}
	_ = (&sseWriter{w: w}).event(data)
}

// sseWriter writes a stateless response's SSE events, its headers (the
// SDK's) before the first.
type sseWriter struct {
	w       http.ResponseWriter
	server  *mcp.Implementation // said in every result's _meta, as the SDK says it on 2026-07-28
	started bool
}

// event writes one JSON-RPC message as an SSE event and flushes it.
func (o *sseWriter) event(data []byte) error {
	if !o.started {
		o.started = true
		h := o.w.Header()
		h.Set("Cache-Control", "no-cache, no-transform")
		h.Set("Content-Type", "text/event-stream")
		h.Set("Connection", "keep-alive")
	}
	b := make([]byte, 0, len("event: message\ndata: \n\n")+len(data))
	b = append(b, "event: message\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	_, err := o.w.Write(b)
	_ = http.NewResponseController(o.w).Flush() // best effort, as the SDK's
	return err
}

// result writes the JSON-RPC response of a tools/call: res, typed
// complete as the SDK types it (its resultType field, unexported, is
// written last, after res's own fields: so here).
func (o *sseWriter) result(id jsonrpc.ID, res *mcp.CallToolResult) error {
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[mcp.MetaKeyServerInfo] = o.server
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return errors.New("mcpserve: a result that is not a JSON object")
	}
	b = append(b[:len(b)-1], `,"resultType":"complete"}`...)
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: b})
	if err != nil {
		return err
	}
	return o.event(data)
}

// progress writes a progress notification.
func (o *sseWriter) progress(n *mcp.ProgressNotificationParams) error {
	p, err := json.Marshal(n)
	if err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/progress", Params: p})
	if err != nil {
		return err
	}
	return o.event(data)
}
