package sources

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"github.com/toolwire/toolwire/sources/openapi"
	"github.com/toolwire/toolwire/tools"
)

// TestStatus reports a static HTTP tool, an MCP server that is up and one
// that cannot be reached, which is retrying with its error.
func TestStatus(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	m := mcp.NewServer(&mcp.Implementation{Name: "test"}, nil)
	mcp.AddTool(m, &mcp.Tool{Name: "ping"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	web := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil))
	defer web.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	set := New(reg, nil)
	defer set.Close()
	if len(set.Status()) != 0 {
		t.Fatalf("before Sync: %+v, want none", set.Status())
	}
	cfg := Config{
		HTTPTools:  []httpsource.Spec{{Name: "hook", Description: "d", URL: web.URL}},
		MCPServers: []mcpsource.ServerConfig{{Name: "live", URL: web.URL}, {Name: "gone", URL: gone.URL}},
	}
	if err := set.Sync(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the MCP server's tools", sourcetest.Has("live_ping"))
	var got map[string]Status
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got = map[string]Status{}
		for _, st := range set.Status() {
			got[st.Kind+"/"+st.Name] = st
		}
		if got["mcp_servers/live"].State == StateUp && got["mcp_servers/gone"].State == StateRetrying {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Status() = %+v; want live up and gone retrying", got)
		}
	}
	if len(got) != 3 {
		t.Errorf("Status() = %+v; want three sources", got)
	}
	if st := got["http_tools/hook"]; st.State != StateStatic || st.Owner != "http" || st.Since.IsZero() {
		t.Errorf("the HTTP tool: %+v; want static, owned by http", st)
	}
	if st := got["mcp_servers/live"]; st.Owner != "mcp:live" || st.Err != "" {
		t.Errorf("the live server: %+v; want owner mcp:live and no error", st)
	}
	if st := got["mcp_servers/gone"]; st.Err == "" {
		t.Errorf("the unreachable server: %+v; want its error", st)
	}
	if owner, _ := reg.Owner("live_ping"); owner != got["mcp_servers/live"].Owner {
		t.Errorf("live_ping is owned by %q; Status says %q", owner, got["mcp_servers/live"].Owner)
	}
}

// TestStatusSkipped: an OpenAPI entry's status counts the operations of
// its document that gave no tool (the Petstore's file upload).
func TestStatusSkipped(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	set := New(reg, nil)
	defer set.Close()
	cfg := Config{OpenAPI: []openapi.Config{{Name: "pets", Spec: "openapi/testdata/petstore.yaml", BaseURL: "http://127.0.0.1:9"}}}
	if err := set.Sync(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	st := set.Status()
	if len(st) != 1 || st[0].Kind != "openapi" || st[0].State != StateStatic || st[0].Skipped != 1 {
		t.Errorf("Status() = %+v; want the entry with one operation skipped", st)
	}
}
