package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

const configYAML = `
listen: 127.0.0.1:0
diag: true
log_level: warn
max_calls: 8
max_result_bytes: 10
call_timeout: 30s
max_call_timeout: 2m
drain_timeout: 1m30s
abandon_grace: 500ms
max_parallel: 4
safe:
  fail: true
`

func TestParseServeArgs(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", configYAML)
	fromFile := serveConfig{
		ServiceConfig: ServiceConfig{Listen: "127.0.0.1:0"}, EngineConfig: EngineConfig{
			MaxCallsPerBatch: 8, MaxResultBytes: 10,
			DefaultCallTimeout: 30 * time.Second, MaxCallTimeout: 2 * time.Minute,
			DrainTimeout: 90 * time.Second, AbandonGrace: 500 * time.Millisecond,
			MaxParallel: 4, Safe: map[string]bool{"fail": true},
		},
		Diag: true, LoggingConfig: LoggingConfig{Level: "warn"},
	}
	tests := []struct {
		name string
		args []string
		want serveConfig
	}{
		{"defaults", nil, serveConfig{ServiceConfig: ServiceConfig{Listen: defaultAddr}, LoggingConfig: LoggingConfig{Level: "info"}}},
		{"flags", []string{"--listen", ":9000", "--diag", "--max-parallel", "2", "--call-timeout", "5s"},
			serveConfig{ServiceConfig: ServiceConfig{Listen: ":9000"}, EngineConfig: EngineConfig{MaxParallel: 2, DefaultCallTimeout: 5 * time.Second},
				Diag: true, LoggingConfig: LoggingConfig{Level: "info"}}},
		{"file", []string{"--config", path}, fromFile},
		{"flags override the file, before or after --config", []string{"--max-result-bytes", "1000", "--config", path, "--drain-timeout", "1s", "--diag=false"},
			func() serveConfig {
				c := fromFile
				c.MaxResultBytes, c.EngineConfig.DrainTimeout, c.Diag = 1000, time.Second, false
				return c
			}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, help, err := parseServeArgs(tt.args, io.Discard)
			if err != nil || help {
				t.Fatalf("parseServeArgs: help %v, error %v", help, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseServeArgsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		// Errors name the file, line and column, in YAML's words.
		{"unknown key", "max_calls: 1\nmax_cals: 2\n", `toolwire.yaml:2:1: unknown key "max_cals" (did you mean "max_calls"?)`},
		{"unknown nested key", "http_tools:\n  - name: x\n    url: http://x/\n    methd: GET\n", `toolwire.yaml:4:5: unknown key "http_tools[0].methd" (did you mean "method"?)`},
		{"key set twice", "max_calls: 1\nmax_calls: 2\n", `toolwire.yaml:2:1: key "max_calls" is set twice (first on line 1)`},
		{"duration as number", "call_timeout: 30\n", `toolwire.yaml:1:15: call_timeout: want a duration as a string such as "30s", not 30`},
		{"bad duration", "drain_timeout: soon\n", `toolwire.yaml:1:16: drain_timeout: want a duration such as "30s" or "1m30s", not "soon"`},
		{"http tool's duration as number", "http_tools:\n  - {name: x, url: 'http://x/', timeout: 30}\n", `toolwire.yaml:2:42: http_tools[0].timeout: want a duration as a string such as "30s", not 30`},
		{"http tool's bad duration", "http_tools:\n  - {name: x, url: 'http://x/', timeout: soon}\n", `toolwire.yaml:2:42: http_tools[0].timeout: want a duration such as "30s" or "1m30s", not "soon"`},
		{"not an integer", "\n  max_calls: ten\n", `toolwire.yaml:2:14: max_calls: want an integer, not "ten"`},
		{"list for a mapping", "safe: [echo]\n", `toolwire.yaml:1:7: safe: want a mapping of keys to values, not a list`},
		{"mapping for a list", "mcp_servers:\n  name: x\n", `toolwire.yaml:2:3: mcp_servers: want a list, not a mapping`},
		{"not YAML", "listen: [\n", "toolwire.yaml:1: did not find expected node content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "toolwire.yaml", tt.yaml)
			_, _, err := parseServeArgs([]string{"--config", path}, io.Discard)
			if err == nil || !strings.HasSuffix(err.Error(), tt.want) || strings.Contains(err.Error(), "JSON") {
				t.Errorf("error %v; want one ending %q", err, tt.want)
			}
		})
	}
	if _, _, err := parseServeArgs([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "--config: open ") {
		t.Errorf("missing config file: %v; want an error naming --config", err)
	}
	// A flag's value says what it wants, as the file's does, where the
	// flag package said "parse error".
	for _, c := range []struct{ args, want string }{
		{"--call-timeout 30", `serve: invalid value "30" for flag -call-timeout: want a duration such as "30s" or "1m30s"`},
		{"--max-calls ten", `serve: invalid value "ten" for flag -max-calls: want an integer`},
		{"--rate-per-caller x", `serve: invalid value "x" for flag -rate-per-caller: want a number`},
		{"--diag=maybe", `serve: invalid boolean value "maybe" for -diag: want true or false`},
	} {
		if _, _, err := parseServeArgs(strings.Fields(c.args), io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.args, err, c.want)
		}
	}
}

func TestServeConfigToService(t *testing.T) {
	t.Parallel()
	cfg, _, err := parseServeArgs([]string{"--config", writeFile(t, "toolwire.yaml", configYAML+"idle_timeout: 3s\ndeadline_margin: 10ms\nevent_buffer: 7\nmax_stream_buffer_bytes: 2048\nsend_timeout: 5s\nmax_argument_bytes: 99\nmax_concurrent_batches: 5\n")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := EngineConfig{
		MaxConcurrentBatches: 5,
		MaxCallsPerBatch:     8,
		MaxArgumentBytes:     99,
		MaxResultBytes:       10,
		DefaultCallTimeout:   30 * time.Second,
		MaxCallTimeout:       2 * time.Minute,
		IdleTimeout:          3 * time.Second,
		DeadlineMargin:       10 * time.Millisecond,
		MaxParallel:          4,
		AbandonGrace:         500 * time.Millisecond,
		DrainTimeout:         90 * time.Second,
		EventBuffer:          7,
		MaxStreamBufferBytes: 2048,
		SendTimeout:          5 * time.Second,
		Safe:                 map[string]bool{"fail": true},
	}
	if diff := cmp.Diff(want, cfg.EngineConfig); diff != "" {
		t.Errorf("engine.Config (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ServiceConfig{Listen: "127.0.0.1:0"}, cfg.ServiceConfig); diff != "" {
		t.Errorf("grpcserve.Config (-want +got):\n%s", diff)
	}
}

// TestServeConfigFile checks that the file's settings reach the server and
// that a flag overrides them: the file caps results at 10 bytes, and logs
// only warnings, so --log-level brings back the listening line.
func TestServeConfigFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", configYAML)
	const text = "longer than ten bytes"
	args := `{"text":"` + text + `"}`

	fromFile := startServe(t, "--config", path, "--log-level", "info")
	got := runCmd(t, fromFile.addr, "call", "echo", args)
	if got.code != 0 || !strings.Contains(got.stdout, "[output truncated") {
		t.Errorf("with max_result_bytes 10: exit %d, stdout %q; want a truncated result", got.code, got.stdout)
	}

	overridden := startServe(t, "--config", path, "--log-level", "info", "--max-result-bytes", "1000")
	got = runCmd(t, overridden.addr, "call", "echo", args)
	if got.code != 0 || got.stdout != text+"\n" {
		t.Errorf("with --max-result-bytes 1000: exit %d, stdout %q; want %q", got.code, got.stdout, text+"\n")
	}
}

// TestServeDrains stops the server while a call runs: the call still
// completes, and serve returns nil.
func TestServeDrains(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")
	var callErr error
	callStderr := &logbuf.Buffer{}
	var stdout bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		callErr = run(ctx, []string{"call", "--addr", s.addr, "sleep", `{"ms":200}`}, &stdout, callStderr)
	}()
	waitFor(t, "the call to start", func() bool { return strings.Contains(callStderr.String(), "started") })
	if err := s.stop(); err != nil {
		t.Errorf("serve returned %v; want nil after draining", err)
	}
	<-done
	if callErr != nil || !strings.Contains(stdout.String(), "slept_ms") {
		t.Errorf("call during shutdown: %v, stdout %q; want it to complete", callErr, stdout.String())
	}
	if !strings.Contains(s.stderr.String(), "shutting down") {
		t.Errorf("no shutdown log:\n%s", s.stderr)
	}
}

// TestBinary builds toolwire and runs "toolwire serve" as a child process on
// a real socket: it answers, and exits 0 on SIGTERM.
func TestBinary(t *testing.T) {
	bin := buildToolwire(t)
	t.Parallel()
	c := startChild(t, exec.Command(bin, "serve", "--diag", "--listen", "127.0.0.1:0"))
	addr := c.addr

	got := runCmd(t, addr, "call", "echo", `{"text":"from a real process"}`)
	if got.err != nil || got.stdout != "from a real process\n" {
		t.Fatalf("call: %v, stdout %q", got.err, got.stdout)
	}

	t.Run("grpcurl", func(t *testing.T) { grpcurlAgainst(t, addr) })

	if log, err := c.stop(t); err != nil {
		t.Errorf("after SIGTERM: %v; want exit status 0\n%s", err, log)
	} else if !strings.Contains(log, "toolwire stopped") {
		t.Errorf("no stop log line:\n%s", log)
	}
}

// grpcurlAgainst drives the server at addr with grpcurl, as the README shows:
// reflection lists the services, health answers, a batch streams to
// BatchFinished, and CallTool answers with its result.
func grpcurlAgainst(t *testing.T, addr string) {
	grpcurl := testenv.LookPath(t, "grpcurl")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(grpcurl, append([]string{"-plaintext"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run(addr, "list"); !strings.Contains(out, "toolwire.v1.ToolService") || !strings.Contains(out, "grpc.health.v1.Health") {
		t.Errorf("grpcurl list:\n%s", out)
	}
	if out := run(addr, "grpc.health.v1.Health/Check"); !strings.Contains(out, "SERVING") {
		t.Errorf("health check:\n%s", out)
	}
	out := run("-d", `{"calls":[{"call_id":"c1","name":"echo","arguments":"{\"text\":\"via grpcurl\"}"},{"call_id":"c2","name":"nope"}]}`,
		addr, "toolwire.v1.ToolService/ExecuteBatch")
	for _, want := range []string{`"accepted"`, `via grpcurl`, `ERROR_KIND_UNKNOWN_TOOL`, `"finished"`, `"succeeded": 1`} {
		if !strings.Contains(out, want) {
			t.Errorf("ExecuteBatch output lacks %s:\n%s", want, out)
		}
	}
	out = run("-d", `{"call":{"call_id":"c3","name":"echo","arguments":"{\"text\":\"unary via grpcurl\"}"}}`,
		addr, "toolwire.v1.ToolService/CallTool")
	for _, want := range []string{`"result"`, `"callId": "c3"`, `unary via grpcurl`} {
		if !strings.Contains(out, want) {
			t.Errorf("CallTool output lacks %s:\n%s", want, out)
		}
	}
}

// TestServeStoppedWhileStarting: a signal while serve starts (here while
// it fetches an OpenAPI document from a server that has not answered)
// stops it at once, and as the stop asked for: not as the configuration's
// failure ("config …: openapi "slow": spec …: terminated signal received",
// exit status 1, as before).
func TestServeStoppedWhileStarting(t *testing.T) {
	t.Parallel()
	asked := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		<-r.Context().Done() // answers nothing until the client gives up
	}))
	defer slow.Close()
	cfg := writeFile(t, "toolwire.yaml", "openapi:\n  - name: slow\n    spec: "+slow.URL+"/openapi.json\n")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stderr logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--no-workspace", "--config", cfg}, &bytes.Buffer{}, &stderr)
	}()
	select {
	case <-asked:
	case err := <-done:
		t.Fatalf("serve returned before it asked for the document: %v\n%s", err, stderr.String())
	case <-time.After(testTimeout):
		t.Fatal("serve never asked for the document")
	}
	cancel() // the signal
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve stopped while starting returned %v; want nil, the stop asked for", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(stderr.String(), "stopped while starting") {
		t.Errorf("the log does not say serve stopped while starting:\n%s", stderr.String())
	}
}
