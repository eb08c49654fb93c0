package main

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"

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
	var buf logbuf.Buffer
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

// TestEvictingRedisWarned: serve on a Redis that evicts keys when full
// says so in its log, as a warning naming the policy.
func TestEvictingRedisWarned(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	srv.Do("CONFIG", "SET", "maxmemory", "64mb")
	srv.Do("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
	s := startServe(t, "--store", srv.URL())
	waitLog(t, s.stderr, `"level":"WARN"`, "maxmemory-policy volatile-lru", `"store":"redis"`)
}
