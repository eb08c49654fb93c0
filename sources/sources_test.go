package sources

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"github.com/toolwire/toolwire/tools"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNameClash runs the one rule for names across a built-in, HTTP tools
// and a real MCP server: the built-in keeps its name; the HTTP tool, there
// first, keeps its own, and the server's tool of that name is held back
// with one log line until the HTTP tool goes; an HTTP tool may not be
// declared under a name another tool serves.
func TestNameClash(t *testing.T) {
	t.Parallel()
	nop := func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text("built-in"), nil }
	reg, err := tools.NewRegistry(tools.Tool{Name: "m_builtin", Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	m := mcp.NewServer(&mcp.Implementation{Name: "test"}, nil)
	for _, name := range []string{"ping", "builtin", "other"} {
		mcp.AddTool(m, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "mcp"}}}, nil, nil
		})
	}
	web := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil))
	defer web.Close()
	logs := &logbuf.Buffer{}
	set := New(reg, slog.New(slog.NewJSONHandler(logs, nil)))
	defer set.Close()

	server := []mcpsource.ServerConfig{{Name: "m", URL: web.URL}}
	cfg := Config{HTTPTools: []httpsource.Spec{{Name: "m_ping", Description: "d", URL: web.URL}}, MCPServers: server}
	if err := set.Check(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := set.Sync(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the MCP server's tools", sourcetest.Has("m_other"))
	// Its log lines follow the registry update.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "MCP tools updated"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no line says the MCP tools were updated:\n%s", logs)
		}
	}
	if !strings.Contains(logs.String(), `"tools":["m_other"]`) {
		t.Errorf("the MCP tools updated line names more than the one tool served:\n%s", logs)
	}
	source := func(name string) tools.Source {
		tl, ok := reg.Snapshot().Lookup(name)
		if !ok {
			return 0
		}
		return tl.Source
	}
	if source("m_builtin") != tools.SourceBuiltin || source("m_ping") != tools.SourceHTTP {
		t.Errorf("m_builtin is %v, m_ping %v; want the built-in and the HTTP tool", source("m_builtin"), source("m_ping"))
	}
	for _, name := range []string{"m_ping", "m_builtin"} {
		n := 0
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, `"msg":"skipping MCP tool: the name is taken by another tool"`) && strings.Contains(line, `"tool":"`+name+`"`) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines say the server's %s is skipped; want 1\n%s", n, name, logs)
		}
	}

	for _, taken := range []string{"m_builtin", "m_other"} {
		bad := Config{HTTPTools: []httpsource.Spec{{Name: taken, Description: "d", URL: web.URL}}, MCPServers: server}
		if err := set.Check(t.Context(), bad); err == nil || !strings.Contains(err.Error(), `tool "`+taken+`": the name is taken by another tool`) {
			t.Errorf("Check with an HTTP tool named %s: %v; want the name taken", taken, err)
		}
	}

	// The HTTP tool goes: the server's m_ping takes its name in that update.
	changed := reg.Changed()
	if err := set.Sync(t.Context(), Config{MCPServers: server}); err != nil {
		t.Fatal(err)
	}
	sourcetest.Wait(t, changed, "the HTTP tool to go")
	if source("m_ping") != tools.SourceMCP {
		t.Errorf("after the HTTP tool went, m_ping is %v; want the MCP server's", source("m_ping"))
	}

	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if got := reg.Snapshot().Names(); len(got) != 1 || got[0] != "m_builtin" {
		t.Errorf("after Close: %v; want only the built-in", got)
	}
}
