package mcpserve

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolwire/toolwire/engine"
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
)

// rpcError maps an error of the engine's to the JSON-RPC error an MCP
// client reads, in this one place: the code by engine.CodeOf, the engine's
// message as it is, and in data the engine code's name as the HTTP port's
// errors spell it ({"code":"resource_exhausted"}). What the model must see
// is never an error here: a failing call is a result (isError).
func rpcError(err error) error {
	code, name := jsonrpc.CodeInternalError, "internal"
	switch engine.CodeOf(err) {
	case engine.InvalidArgument:
		code, name = jsonrpc.CodeInvalidParams, "invalid_argument"
	case engine.ResourceExhausted:
		code, name = CodeResourceExhausted, "resource_exhausted"
	case engine.Unavailable:
		code, name = CodeUnavailable, "unavailable"
	case engine.DeadlineExceeded:
		code, name = CodeDeadlineExceeded, "deadline_exceeded"
	case engine.Canceled:
		code, name = CodeCancelled, "cancelled"
	case engine.Internal:
	default:
		name = "unknown"
	}
	msg := err.Error()
	if e, ok := err.(*engine.Error); ok {
		msg = e.Message
	}
	data, _ := json.Marshal(struct {
		Code string `json:"code"`
	}{name})
	return &jsonrpc.Error{Code: int64(code), Message: msg, Data: data}
}
