package mcpserve

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolwire/toolwire/engine"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The JSON-RPC error codes of the engine's refusals that JSON-RPC has no
// code for, in the range MCP leaves to implementations (-32000 to -32019;
// -32002 is left alone, the SDK's old "resource not found").
const (
	// CodeResourceExhausted: the server runs its limit of calls, or a
	// session has its limit of calls waiting; retry with backoff.
	CodeResourceExhausted = -32010
	// CodeUnavailable: the server is shutting down; retry on another
	// replica.
	CodeUnavailable = -32011
	// CodeDeadlineExceeded: the request's deadline passed first.
	CodeDeadlineExceeded = -32012
	// CodeCancelled: the request was cancelled first.
	CodeCancelled = -32013
	// CodeNotFound: what the request names (a batch) does not exist, or
	// not for this caller.
	CodeNotFound = -32014
	// CodePermissionDenied: the caller may not do what it asked.
	CodePermissionDenied = -32015
	// CodeUnauthenticated: the request's credentials prove no caller.
	CodeUnauthenticated = -32016
)

// rpcCodes are the JSON-RPC codes of the engine's codes; any other is
// the internal error's.
var rpcCodes = map[engine.Code]int64{
	engine.InvalidArgument: jsonrpc.CodeInvalidParams, engine.ResourceExhausted: CodeResourceExhausted, engine.Unavailable: CodeUnavailable,
	engine.DeadlineExceeded: CodeDeadlineExceeded, engine.Canceled: CodeCancelled, engine.NotFound: CodeNotFound,
	engine.PermissionDenied: CodePermissionDenied, engine.Unauthenticated: CodeUnauthenticated,
	engine.Aborted: jsonrpc.CodeInvalidParams, // a tools/list cursor of an earlier revision: MCP's invalid cursor
}

// rpcError maps an error of the engine's to the JSON-RPC error an MCP
// client reads, in this one place: the code by engine.CodeOf, the engine's
// message as it is, and in data the engine code's name as the HTTP port's
// errors spell it ({"code":"resource_exhausted"}). What the model must see
// is never an error here: a failing call is a result (isError).
func rpcError(err error) error {
	c := engine.CodeOf(err)
	code, ok := rpcCodes[c]
	if !ok {
		code = jsonrpc.CodeInternalError
	}
	name := c.Name()
	if c == engine.OK {
		name = "unknown" // an error never reads as success
	}
	msg := err.Error()
	var details []json.RawMessage
	if e, ok := err.(*engine.Error); ok {
		msg = e.Message
		details = jsonDetails(e.Details())
	}
	data, _ := json.Marshal(struct {
		Code    string            `json:"code"`
		Details []json.RawMessage `json:"details,omitempty"`
	}{name, details})
	return &jsonrpc.Error{Code: int64(code), Message: msg, Data: data}
}

// jsonDetails writes an error's details as google.rpc.Status does in
// JSON: each a protobuf Any, its type in "@type" beside its fields, such as
// {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1s"}.
func jsonDetails(ds []proto.Message) []json.RawMessage {
	var out []json.RawMessage
	for _, d := range ds {
		a, err := anypb.New(d)
		if err != nil {
			continue
		}
		if b, err := protojson.Marshal(a); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// Refuse writes one of the HTTP port's own refusals (a body past its
// limit, the drain) as MCP clients read errors: a JSON-RPC error answering
// the request's ID, found in the body's first 64 KiB, so the client fails
// that call and keeps its connection; without an ID, the status with a
// JSON-RPC error of ID null. A refused Host or Origin (403) is answered as
// the MCP spec says: 403, with an error of no ID, the body left unread.
// It is httpserve.Refuse for /mcp.
func Refuse(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	id := json.RawMessage("null")
	if status != http.StatusForbidden {
		id = requestID(io.LimitReader(r.Body, 64<<10))
	}
	rpc := int64(jsonrpc.CodeInvalidRequest)
	switch code {
	case "resource_exhausted":
		rpc = CodeResourceExhausted
	case "unavailable":
		rpc = CodeUnavailable
	case "permission_denied":
		rpc = CodePermissionDenied
	}
	data, _ := json.Marshal(struct {
		Code string `json:"code"`
	}{code})
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpcError    `json:"error"`
	}{"2.0", id, jsonrpcError{Code: rpc, Message: message, Data: data}})
	w.Header().Set("Content-Type", "application/json")
	if string(id) != "null" {
		status = http.StatusOK // a JSON-RPC response, to the request it names
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

type jsonrpcError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// requestID is the top-level "id" of the JSON-RPC request r begins, or
// null: read token by token, so a huge body is never held.
func requestID(r io.Reader) json.RawMessage {
	d := json.NewDecoder(r)
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return json.RawMessage("null")
	}
	for d.More() {
		key, err := d.Token()
		if err != nil {
			break
		}
		var v json.RawMessage
		if key == "id" {
			if d.Decode(&v) == nil && (len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))) {
				return v
			}
			break
		}
		if d.Decode(&v) != nil { // skips the value; a huge one stops at the limit
			break
		}
	}
	return json.RawMessage("null")
}
