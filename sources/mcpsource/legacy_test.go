package mcpsource

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
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
)

// TestLegacySSEServer: a server of MCP's older HTTP+SSE transport, given
// as url, is retried with an error saying so, where the SDK said only
// that the initialize POST was refused ("Not Found" from server-everything
// 2026.8.31's sse mode, "Bad Request" from the go-sdk's SSEHandler), as if
// the URL were wrong; a streamable HTTP URL that refuses the POST gets no
// such hint.
func TestLegacySSEServer(t *testing.T) {
	srv := testserver.New(testserver.Hooks{})
	legacy := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(legacy.Close)
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	const hint = "the server speaks MCP's older HTTP+SSE transport (2024-11-05), which toolwire does not"
	for _, tc := range []struct {
		name, url string
		hint      bool
	}{
		{"HTTP+SSE", legacy.URL, true},
		{"not found", missing.URL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newGateway(t)
			logs := &logbuf.Buffer{}
			g.log = slog.New(slog.NewTextHandler(logs, nil))
			g.set.MinBackoff, g.set.MaxBackoff = time.Minute, time.Minute // one attempt is enough
			if err := g.Sync(context.Background(), []ServerConfig{{Name: "old", URL: tc.url}}); err != nil {
				t.Fatal(err)
			}
			waitLog(t, logs, "MCP server unavailable; retrying")
			if got := strings.Contains(logs.String(), hint); got != tc.hint {
				t.Errorf("the log says %q: %v; want %v:\n%s", hint, got, tc.hint, logs)
			}
		})
	}
}
