package mcpserve

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/tools"
	"go.opentelemetry.io/otel/trace"
)

// A call through /mcp continues the client's trace, as on the other
// surfaces: the one in the request's _meta (OpenTelemetry's conventions
// for MCP), else the one in its traceparent header; at both revisions, so
// through toolwire's own answer to a stateless call and through the SDK's.
func TestCallContinuesTheClientsTrace(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	if err := ts.reg.Add(tools.MustTyped("trace_id", "Returns the trace its call is in.", func(ctx context.Context, _ *tools.Call, _ struct{}) (*tools.Result, any, error) {
		return tools.Text(trace.SpanContextFromContext(ctx).TraceID().String()), nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	const (
		metaTrace   = "4bf92f3577b34da6a3ce929d0e0e4736"
		headerTrace = "0af7651916cd43dd8448eb211c80319c"
		none        = "00000000000000000000000000000000"
	)
	parent := func(id string) string { return "00-" + id + "-00f067aa0ba902b7-01" }
	for _, rev := range []string{RevisionStateless, RevisionSessions} {
		t.Run(rev, func(t *testing.T) {
			t.Parallel()
			// The go-sdk's client, trace context in _meta.
			cs := connect(t, ts.url, "alice-token", rev, nil)
			if got := text(call(t, cs, "trace_id", `{}`, mcp.Meta{"traceparent": parent(metaTrace)})); got != metaTrace {
				t.Errorf("_meta.traceparent: the call ran in trace %s, want %s", got, metaTrace)
			}
			if got := text(call(t, cs, "trace_id", `{}`, nil)); got != none {
				t.Errorf("no trace context: the call ran in trace %s", got)
			}
			// Raw requests, in the header, and in both (_meta wins).
			c := newRawClient(t, ts.url, "alice-token", rev)
			for _, tc := range []struct {
				name   string
				header string
				meta   string
				want   string
			}{
				{"header", parent(headerTrace), "", headerTrace},
				{"both", parent(headerTrace), parent(metaTrace), metaTrace},
				{"meta not a string", parent(headerTrace), "", headerTrace},
			} {
				body := map[string]any{}
				if err := json.Unmarshal([]byte(c.request(1, "tools/call", `{"name":"trace_id","arguments":{}}`)), &body); err != nil {
					t.Fatal(err)
				}
				params := body["params"].(map[string]any)
				meta, _ := params["_meta"].(map[string]any)
				if meta == nil {
					meta = map[string]any{}
					params["_meta"] = meta
				}
				switch {
				case tc.meta != "":
					meta["traceparent"] = tc.meta
				case tc.name == "meta not a string":
					meta["traceparent"] = 7
				}
				b, _ := json.Marshal(body)
				h := http.Header{"Traceparent": {tc.header}}
				if rev >= RevisionStateless {
					h.Set("Mcp-Method", "tools/call")
					h.Set("Mcp-Name", "trace_id")
				}
				resp := c.post(string(b), h)
				got := string(readAll(t, resp))
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %s\n%s", tc.name, resp.Status, got)
				}
				if !containsTrace(got, tc.want) {
					t.Errorf("%s: want the call in trace %s; got\n%s", tc.name, tc.want, got)
				}
			}
		})
	}
}

// containsTrace reports whether a response's result text is id.
func containsTrace(body, id string) bool {
	for _, ev := range sseEvents([]byte(body)) {
		var r struct {
			Result mcp.CallToolResult `json:"result"`
		}
		if json.Unmarshal([]byte(ev.data), &r) == nil && text(&r.Result) == id {
			return true
		}
	}
	var r struct {
		Result mcp.CallToolResult `json:"result"`
	}
	return json.Unmarshal([]byte(body), &r) == nil && text(&r.Result) == id
}
