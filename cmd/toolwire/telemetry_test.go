package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// adminAddr returns the address in the "admin listening on" log line.
// waitAdminAddr waits for s's admin listener to be logged, which comes a
// moment after the line startServe waits for, and returns its address.
func waitAdminAddr(t *testing.T, s *server) string {
	t.Helper()
	var addr string
	waitFor(t, "the admin listening line", func() bool {
		var ok bool
		addr, ok = adminAddr(s.stderr.String())
		return ok
	})
	return addr
}

func adminAddr(log string) (string, bool) {
	for line := range strings.Lines(log) {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"admin_addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "admin listening on ") {
			return rec.Addr, true
		}
	}
	return "", false
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestAdminMetrics scrapes /metrics over real HTTP after a few calls: the
// tool metrics, otelgrpc's RPC metrics and the Go runtime's are there.
func TestAdminMetrics(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag", "--admin-listen", "127.0.0.1:0")
	addr := waitAdminAddr(t, s)
	if got := runCmd(t, s.addr, "call", "echo", `{"text":"hi"}`); got.code != 0 {
		t.Fatalf("call echo: exit %d, %s", got.code, got.stderr)
	}
	if got := runCmd(t, s.addr, "call", "fail", `{"message":"no"}`); got.code == 0 {
		t.Fatalf("call fail: exit 0; want a failure")
	}

	code, body := httpGet(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	for _, want := range []string{
		`gen_ai_execute_tool_duration_seconds_bucket{`,
		`gen_ai_execute_tool_duration_seconds_count{error_type="tool_error",gen_ai_operation_name="execute_tool",gen_ai_tool_name="fail"`,
		`gen_ai_execute_tool_duration_seconds_count{gen_ai_operation_name="execute_tool",gen_ai_tool_name="echo"`,
		`toolwire_call_results_total{error_type="tool_error"`,
		`toolwire_call_queue_wait_seconds_bucket{`,
		`toolwire_calls_in_flight{`,
		`rpc_server_call_duration_seconds_bucket{`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
	if code, _ := httpGet(t, "http://"+addr+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/: %d", code)
	}
}

// TestAdminListenerIsOffByDefault checks that serve without --admin-listen
// opens no admin listener.
func TestAdminListenerIsOffByDefault(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")
	if addr, ok := adminAddr(s.stderr.String()); ok {
		t.Errorf("admin listener on %s without --admin-listen", addr)
	}
}

func TestTelemetrySettings(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", "admin_listen: 127.0.0.1:9090\ntrace_content: true\n")
	for name, args := range map[string][]string{
		"flags": {"--admin-listen", "127.0.0.1:9090", "--trace-content"},
		"file":  {"--config", path},
	} {
		cfg, _, err := parseServeArgs(args, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := defaultServeConfig()
		want.AdminListen, want.TraceContent = "127.0.0.1:9090", true
		if diff := cmp.Diff(want, cfg); diff != "" {
			t.Errorf("%s: config (-want +got):\n%s", name, diff)
		}
		if !cfg.TraceContent {
			t.Errorf("%s: trace_content does not reach serve's configuration, which gives it to the engine's telemetry", name)
		}
	}
}

// TestExportWanted checks which OTEL_* settings turn export on: nothing is
// exported unless they ask.
func TestExportWanted(t *testing.T) {
	for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		t.Setenv(v, "")
	}
	tests := []struct {
		name          string
		env           map[string]string
		traces, metrs bool
	}{
		{"nothing set", nil, false, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, true},
		{"traces endpoint only", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, false},
		{"exporter named", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, false},
		{"exporter none beats an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_METRICS_EXPORTER": "none"}, true, false},
		{"SDK disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if got := exportWanted("TRACES"); got != tt.traces {
				t.Errorf("traces: %v; want %v", got, tt.traces)
			}
			if got := exportWanted("METRICS"); got != tt.metrs {
				t.Errorf("metrics: %v; want %v", got, tt.metrs)
			}
		})
	}
}

// TestServeRejectsABadExporter checks that an OTEL_* setting naming no known
// exporter stops serve with an error that says which setting is wrong.
func TestServeRejectsABadExporter(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"serve", "--listen", "127.0.0.1:0"}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("serve with OTEL_TRACES_EXPORTER=carrier-pigeon: %v; want an error naming the variable", err)
	}
}

// TestStoreSubscriptionFailuresMetric: serve on a Redis whose user may not
// use the notices' channel (NOPERM) counts its failed subscriptions in
// /metrics once a detached batch watches for a cancel.
func TestStoreSubscriptionFailuresMetric(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	srv.Do("ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "+@all", "resetchannels")
	s := startServe(t, "--diag", "--admin-listen", "127.0.0.1:0", "--store", "redis://nochannels:pw@"+srv.Addr+"/0", "--drain-timeout", "100ms")
	addr := waitAdminAddr(t, s)
	startDetached(t, s.addr, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("s", "sleep", map[string]int{"ms": 60000}),
	}}, func(ev *toolwirev1.ExecuteBatchResponse) bool { return ev.GetStarted() != nil })
	failures := regexp.MustCompile(`(?m)^toolwire_store_subscription_failures_total(\{[^}]*\})? ([0-9]+)$`)
	waitFor(t, "a failed subscription counted in /metrics", func() bool {
		_, body := httpGet(t, "http://"+addr+"/metrics")
		m := failures.FindStringSubmatch(body)
		return m != nil && m[2] != "0"
	})
}

// TestAdminAllowedHosts: the admin listener answers to IP addresses and
// localhost, as Prometheus finds it, and to the names in
// admin_allowed_hosts; a request naming another host (a DNS-rebinding
// page) gets 403 naming the setting; /debug/pprof/cmdline, which would
// show the command line's secrets, is not served; and a setting that is
// not a host name refuses the start.
func TestAdminAllowedHosts(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag", "--admin-listen", "127.0.0.1:0", "--admin-allowed-hosts", "prom.example,*.monitoring.svc")
	addr := waitAdminAddr(t, s)
	_, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{addr, "/metrics", http.StatusOK},
		{"localhost:" + port, "/debug/pprof/heap", http.StatusOK},
		{"prom.example:" + port, "/metrics", http.StatusOK},
		{"scraper.monitoring.svc", "/metrics", http.StatusOK},
		{"evil.example:" + port, "/metrics", http.StatusForbidden},
		{"evil.example:" + port, "/debug/pprof/", http.StatusForbidden},
		{"prom.example.evil.example", "/debug/pprof/goroutine", http.StatusForbidden},
		{addr, "/debug/pprof/cmdline", http.StatusNotFound},
	} {
		resp, body := send(t, http.MethodGet, addr, tc.path, "", map[string]string{"Host": tc.host})
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with Host %s: %d %.200s; want %d", tc.path, tc.host, resp.StatusCode, body, tc.want)
		}
		if tc.want == http.StatusForbidden && !strings.Contains(body, "admin_allowed_hosts (--admin-allowed-hosts)") {
			t.Errorf("GET %s with Host %s: %q; want the refusal to name admin_allowed_hosts", tc.path, tc.host, body)
		}
	}

	var stderr bytes.Buffer
	err := run(t.Context(), []string{"serve", "--diag", "--admin-listen", "127.0.0.1:0", "--admin-allowed-hosts", "http://prom.example"}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error()+stderr.String(), `admin_allowed_hosts: "http://prom.example" is not a host name`) {
		t.Errorf("serve with a URL in --admin-allowed-hosts: %v, %s; want it refused, naming the setting", err, stderr.String())
	}
}
