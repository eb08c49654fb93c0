package mcpserve

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// capabilities is what /mcp declares, in initialize's result (2025-11-25)
// and server/discover's (2026-07-28): tools, with list-changed notices, and
// nothing else. It is the whole declaration (a non-nil
// ServerOptions.Capabilities is never merged with the SDK's default
// logging capability).
func capabilities() *mcp.ServerCapabilities {
	return &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}
}

// served are the requests /mcp answers: the base protocol's (initialize
// and ping on 2025-11-25, server/discover and subscriptions/listen on
// 2026-07-28; the SDK refuses each on the revision that has no such
// method) and those of the tools capability. Notifications are not
// requests and are not in the list.
//
// The go-sdk answers more, whatever a server declares: prompts/list and
// resources/list with empty lists, logging/setLevel with an empty result.
// A client that reads those answers as support (the conformance suite's
// server-stateless does, and so would any client that probes instead of
// reading the declaration) is misled, so every other request gets what
// MCP gives a method "gated behind a server capability the server did not
// advertise": -32601 Method not found (with HTTP 404 on 2026-07-28, where
// the SDK maps the code to the status).
var served = map[string]bool{
	"initialize":           true,
	"ping":                 true,
	"server/discover":      true,
	"subscriptions/listen": true,
	"tools/list":           true,
	"tools/call":           true,
}

// refuseUndeclared is the first receiving middleware: a request for a
// method /mcp does not serve ends here, as Method not found, before the
// SDK's own handler can answer it.
func refuseUndeclared(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if served[method] || strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req)
		}
		// The SDK's JSON-RPC layer rewrites any Method not found to its own
		// message, `method not found: "<method>"`.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
	}
}
