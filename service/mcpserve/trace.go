package mcpserve

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/rpctelemetry"
	"go.opentelemetry.io/otel/propagation"
)

// traceKeys are the _meta keys in which an MCP client sends its trace
// context (OpenTelemetry's semantic conventions for MCP): W3C trace
// context and baggage, as the headers of those names carry them.
var traceKeys = [...]string{"traceparent", "tracestate", "baggage"}

// clientTrace returns ctx continuing the trace the client sent: the one
// in the request's _meta (trace, from traceMeta or metaTrace), else the
// one in the HTTP request's headers. So a call through /mcp continues the
// agent's trace as on the other surfaces: the engine's spans and log
// lines name it, and the tool's upstream requests carry it on.
func clientTrace(ctx context.Context, trace propagation.MapCarrier, h http.Header) context.Context {
	switch {
	case trace["traceparent"] != "":
		return rpctelemetry.Extract(ctx, trace)
	case h.Get("Traceparent") != "" || h.Get("Baggage") != "":
		return rpctelemetry.Extract(ctx, propagation.HeaderCarrier(h))
	}
	return ctx
}

// traceMeta returns the trace context in the fast path's raw _meta; nil
// when there is none. A value that is not a string is left out.
func traceMeta(meta map[string]json.RawMessage) propagation.MapCarrier {
	var c propagation.MapCarrier
	for _, k := range traceKeys {
		var v string
		if raw, ok := meta[k]; ok && json.Unmarshal(raw, &v) == nil && v != "" {
			if c == nil {
				c = propagation.MapCarrier{}
			}
			c[k] = v
		}
	}
	return c
}

// metaTrace returns the trace context in the SDK's decoded _meta; nil when
// there is none.
func metaTrace(meta mcp.Meta) propagation.MapCarrier {
	var c propagation.MapCarrier
	for _, k := range traceKeys {
		if v, ok := meta[k].(string); ok && v != "" {
			if c == nil {
				c = propagation.MapCarrier{}
			}
			c[k] = v
		}
	}
	return c
}
