package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
)

func TestLogFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		format string
		want   string // in the line
	}{
		{"json", `"retry_in":"500ms"`},
		{"", `"retry_in":"500ms"`}, // a buffer is no terminal: JSON
		{"text", `level=WARN msg=retrying retry_in=500ms`},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log, err := newLogger(serveConfig{LoggingConfig: LoggingConfig{Level: "info", Format: tt.format}}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("retrying", "retry_in", 500*time.Millisecond)
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("--log-format %q: %s; want %s", tt.format, buf.String(), tt.want)
		}
	}
	if _, err := newLogger(serveConfig{LoggingConfig: LoggingConfig{Level: "info", Format: "xml"}}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("--log-format xml: %v; want an error naming the formats", err)
	}
}

// TestServeLogsRetryAsDuration serves an MCP server nothing listens for:
// the gateway's retry line gives the delay as a duration.
func TestServeLogsRetryAsDuration(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String() + "/mcp"
	lis.Close() // now nothing answers there
	s := startServe(t, "--config", writeFile(t, "toolwire.yaml", "mcp_servers:\n  - name: gone\n    url: "+url+"\n"))
	waitLog(t, s.stderr, "MCP server unavailable; retrying", `"retry_in":"500ms"`)
}

// TestLibraryLogs checks that the OpenTelemetry SDK's and the Redis
// client's complaints arrive in serve's log, not as the standard logger's
// plain lines. Both libraries keep their logger in a global, so this test
// does not run in parallel with others that set it.
func TestLibraryLogs(t *testing.T) {
	var buf syncBuffer
	routeLibraryLogs(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { routeLibraryLogs(slog.New(slog.DiscardHandler)) })

	otel.Handle(errors.New("exporter unreachable"))
	if !strings.Contains(buf.String(), `"msg":"opentelemetry","error":"exporter unreachable"`) {
		t.Errorf("otel.Handle went to %q; want a JSON line in serve's log", buf.String())
	}

	// A real Redis client dialling a port nothing listens on logs its
	// failed dials.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rc.Close()
	if err := rc.Ping(t.Context()).Err(); err == nil {
		t.Fatal("ping reached a closed port")
	}
	waitFor(t, "the Redis client's log line", func() bool {
		return strings.Contains(buf.String(), `"level":"WARN","msg":"redis client: redis: connection pool: failed to dial`)
	})
}

func TestStoreKind(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"": "memory", "memory": "memory", "bolt:///var/lib/toolwire.db": "bolt",
		"redis://:secret@redis:6379/0": "redis", "rediss://redis:6380/0": "redis",
	} {
		if got := (StoreConfig{URL: in}).Kind(); got != want {
			t.Errorf("Kind of %q = %q; want %q", in, got, want)
		}
	}
	s := startServe(t)
	waitLog(t, s.stderr, `"msg":"idempotency and session store","store":"memory"`)
}

// TestReloadedLineShowsNewConfig removes a connected MCP server by reload:
// the "config reloaded" line names what the new config declares, not the
// tools the registry held a moment before (the server's tools leave in the
// background).
func TestReloadedLineShowsNewConfig(t *testing.T) {
	t.Parallel()
	m := mcp.NewServer(&mcp.Implementation{Name: "test"}, nil)
	mcp.AddTool(m, &mcp.Tool{Name: "ping"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
	})
	web := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil))
	t.Cleanup(web.Close)

	path := writeFile(t, "toolwire.yaml", "mcp_servers:\n  - name: old\n    url: "+web.URL+"\n")
	reg, logs, _ := testReloader(t, path)
	waitFor(t, "the MCP server's tools", func() bool { _, ok := reg.Snapshot().Lookup("old_ping"); return ok })

	replaceFile(t, path, httpToolsYAML("fresh", web.URL)+"mcp_servers: []\n")
	waitLog(t, logs, `"msg":"config reloaded"`)
	for line := range strings.Lines(logs.String()) {
		if !strings.Contains(line, `"msg":"config reloaded"`) {
			continue
		}
		if !strings.Contains(line, `"http_tools":["fresh"],"mcp_servers":[],"remotes":[]`) || strings.Contains(line, "old") {
			t.Errorf("config reloaded line:\n%s\nwant the new config's sources, and nothing of the removed server", line)
		}
	}
}
