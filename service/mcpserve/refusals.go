package mcpserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What /mcp refuses, it refuses in JSON-RPC, as MCP clients read errors:
// a body {"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…,"data":…}}
// answering the request's ID (null when it has none), with the HTTP
// status the transport's spec asks for (404 for a session that is gone,
// which tells a client to open another; 400 for a bad request; …). The
// go-sdk answers many refusals itself, in plain text (http.Error); the
// refusing writer below turns every one of those into a JSON-RPC error,
// whichever check wrote it, so a refusal the SDK adds later is covered
// too. The checks the SDK gets wrong or lacks are made before it sees the
// request: an unsupported protocol version, a batched initialize, a
// request of a session that names none.

// CodeSessionNotFound is the JSON-RPC error code of a request naming a
// session this server does not have (HTTP 404), as the TypeScript SDK's
// servers answer it: the client should open another with initialize.
const CodeSessionNotFound = -32001

// Refusals the SDK has no constant for.
const (
	// codeUnsupportedVersion is mcp.CodeUnsupportedProtocolVersion.
	codeUnsupportedVersion = mcp.CodeUnsupportedProtocolVersion
)

// versions are the protocol versions served, newest first.
var versions = mcp.SupportedProtocolVersions()

// writeRefusal answers r with a JSON-RPC error of code, message and data
// (the engine-style {"code": name} when data is nil) under status. id is
// the request's ID, or null.
func writeRefusal(w http.ResponseWriter, status int, id json.RawMessage, code int64, name, message string, data any) {
	if data == nil {
		data = struct {
			Code string `json:"code"`
		}{name}
	}
	d, _ := json.Marshal(data)
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpcError    `json:"error"`
	}{"2.0", id, jsonrpcError{Code: code, Message: message, Data: d}})
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// unsupportedVersion refuses a request whose Mcp-Protocol-Version is none
// this server speaks, with or without a session, before anything else is
// looked at: 400 and the protocol's own error, listing what is served.
func unsupportedVersion(w http.ResponseWriter, body *capture, version string) {
	writeRefusal(w, http.StatusBadRequest, body.id(), codeUnsupportedVersion, "",
		fmt.Sprintf("unsupported protocol version %q (Mcp-Protocol-Version): this server speaks %s", version, strings.Join(versions, ", ")),
		mcp.UnsupportedProtocolVersionData{Supported: versions, Requested: version})
}

// known reports whether v is a protocol version this server speaks.
func known(v string) bool { return slices.Contains(versions, v) }

// capture keeps the first 64 KiB read of a request's body: enough to find
// its ID when a refusal is written after the SDK has read it.
type capture struct {
	io.ReadCloser
	kept []byte
}

const captureBytes = 64 << 10

func (c *capture) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if room := captureBytes - len(c.kept); room > 0 && n > 0 {
		c.kept = append(c.kept, p[:min(n, room)]...)
	}
	return n, err
}

// id is the ID of the JSON-RPC request the body begins (what was read of
// it, then what is left, up to 64 KiB), or null.
func (c *capture) id() json.RawMessage {
	rest := io.LimitReader(c.ReadCloser, int64(captureBytes-len(c.kept)))
	return requestID(io.MultiReader(bytes.NewReader(c.kept), rest))
}

// refusing is the response writer the SDK writes to: it passes every
// response through, but holds back a refusal (status 400 or more) so that
// finish can write it as a JSON-RPC error. It records the status.
type refusing struct {
	http.ResponseWriter
	status   int
	held     bool         // a refusal is held back
	body     bytes.Buffer // the refusal's body, up to 64 KiB
	overflow bool         // the refusal's body was larger: passed through as it was
	sessions bool         // served by the handler with sessions
	method   string       // the request's
}

func (w *refusing) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	if status >= 400 {
		w.held = true
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *refusing) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.held {
		return w.ResponseWriter.Write(p)
	}
	if w.body.Len()+len(p) > captureBytes {
		// Not a refusal of the SDK's (those are a line): pass it on.
		w.held, w.overflow = false, true
		w.ResponseWriter.WriteHeader(w.status)
		if _, err := w.ResponseWriter.Write(w.body.Bytes()); err != nil {
			return 0, err
		}
		return w.ResponseWriter.Write(p)
	}
	return w.body.Write(p)
}

// FlushError flushes a response passed through; a refusal held back waits
// for finish.
func (w *refusing) FlushError() error {
	if w.held {
		return nil
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *refusing) Flush() { _ = w.FlushError() }

func (w *refusing) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the refusal held back, if any: a JSON-RPC error as it
// was, or the SDK's plain-text refusal as a JSON-RPC error with the same
// status and a code for it.
func (w *refusing) finish(body *capture) {
	if !w.held {
		return
	}
	w.held = false
	text := strings.TrimSpace(w.body.String())
	var rpc struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpcError   `json:"error"`
	}
	if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") && json.Unmarshal(w.body.Bytes(), &rpc) == nil && rpc.Error != nil {
		if w.sessions && rpc.Error.Code == codeUnsupportedVersion {
			// The SDK's answer to a request of a session that carries the
			// per-request _meta of 2026-07-28: it says the session's own
			// version is unsupported, while its list has it.
			writeRefusal(w.ResponseWriter, w.status, rpc.ID, jsonrpc.CodeInvalidRequest, "invalid_argument",
				`the request carries _meta "io.modelcontextprotocol/protocolVersion", which only requests without a session send (Mcp-Protocol-Version: `+RevisionStateless+`); a request of a `+RevisionSessions+` session (or older) must not`, nil)
			return
		}
		w.ResponseWriter.WriteHeader(w.status)
		_, _ = w.ResponseWriter.Write(w.body.Bytes())
		return
	}
	code, name, message := int64(jsonrpc.CodeInvalidRequest), "invalid_argument", text
	switch {
	case w.status == http.StatusNotFound:
		code, name = CodeSessionNotFound, "not_found"
		message = "session not found: it was closed (DELETE), left idle past mcp_session_idle_timeout, closed for a newer one past mcp_max_sessions_per_caller or mcp_max_sessions, or opened on another replica; open another with initialize"
	case w.status == http.StatusForbidden:
		code, name = CodePermissionDenied, "permission_denied"
		if text == "session user mismatch" {
			message = "the session belongs to another caller"
		}
	case w.status == http.StatusMethodNotAllowed:
		message = fmt.Sprintf("the method %s is not served here (Allow: %s)", w.method, w.Header().Get("Allow"))
	case w.status == http.StatusRequestEntityTooLarge:
		code, name = CodeResourceExhausted, "resource_exhausted"
	case w.status >= 500:
		code, name = jsonrpc.CodeInternalError, "internal"
	case strings.HasPrefix(text, "malformed payload"):
		code = jsonrpc.CodeParseError
	case strings.HasPrefix(text, "JSON RPC not handled"):
		// A method no MCP revision has: JSON-RPC's Method not found, as
		// 2026-07-28 and the undeclared capabilities' methods answer.
		code, name = jsonrpc.CodeMethodNotFound, "unimplemented"
	}
	if message == "" {
		message = http.StatusText(w.status)
	}
	writeRefusal(w.ResponseWriter, w.status, body.id(), code, name, message, nil)
}
