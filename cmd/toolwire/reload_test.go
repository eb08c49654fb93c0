package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/sources"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"github.com/toolwire/toolwire/sources/remote"
	"github.com/toolwire/toolwire/tools"
)

// httpToolsYAML is a config declaring one read-only HTTP tool, name, that
// fetches url.
func httpToolsYAML(name, url string) string {
	return "http_tools:\n- name: " + name + "\n  description: fetch\n  url: " + url + "\n  read_only: true\n"
}

// replaceFile writes content to path the way editors do: a new file
// renamed over the old one.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits for a log line containing every one of want.
func waitLog(t *testing.T, log *logbuf.Buffer, want ...string) {
	t.Helper()
	waitFor(t, "a log line with "+strings.Join(want, ", "), func() bool {
		for line := range strings.Lines(log.String()) {
			all := true
			for _, w := range want {
				all = all && strings.Contains(line, w)
			}
			if all {
				return true
			}
		}
		return false
	})
}

// countLines counts the log lines containing s.
func countLines(log *logbuf.Buffer, s string) int {
	return strings.Count(log.String(), s)
}

func TestRestartOnly(t *testing.T) {
	t.Parallel()
	a := defaultServeConfig()
	b := a
	b.ServiceConfig.Listen, b.MaxCallsPerBatch, b.Safe = ":1", 9, map[string]bool{"x": true}
	if diff := cmp.Diff([]string{"listen", "max_calls", "safe"}, restartOnly(a, b)); diff != "" {
		t.Errorf("restartOnly (-want +got):\n%s", diff)
	}
	c := a
	c.HTTPTools = make([]httpsource.Spec, 1)
	c.MCPServers = make([]mcpsource.ServerConfig, 1) // in the embedded Sources
	c.Remotes = make([]remote.Config, 1)
	if got := restartOnly(a, c); len(got) != 0 {
		t.Errorf("http_tools, mcp_servers and remotes changed: %v; want nothing needing a restart", got)
	}
	d := a
	d.StoreConfig.URL, d.Auth.TokensFile = "redis://r:6379/0", "/t" // keys of embedded structs
	if diff := cmp.Diff([]string{"auth", "store"}, restartOnly(a, d)); diff != "" {
		t.Errorf("restartOnly of embedded keys (-want +got):\n%s", diff)
	}
}

// TestServeInvalidConfig: an invalid http_tools at start is an error that
// names the tool and the problem, and serve does not start.
func TestServeInvalidConfig(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", "http_tools:\n- {name: x, method: FETCH, url: 'http://h/'}\n")
	err := run(t.Context(), []string{"serve", "--no-workspace", "--listen", "127.0.0.1:0", "--config", path}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `tool "x": method "FETCH"`) || !strings.Contains(err.Error(), path) {
		t.Errorf("serve: %v; want an error naming the file, tool and method", err)
	}
}

// TestReloadBinary runs "toolwire serve --config" as a child process and
// changes its config under it: WatchTools sees each new revision, ListTools
// the new tools, an invalid file is logged and changes nothing, SIGHUP
// re-reads the file, and the HTTP tool answers through ExecuteBatch.
func TestReloadBinary(t *testing.T) {
	bin := buildToolwire(t)
	t.Parallel()
	slowStarted, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(slowStarted)
			<-release
		}
		io.WriteString(w, "hello from "+r.URL.Path)
	}))
	defer up.Close()
	path := filepath.Join(t.TempDir(), "toolwire.yaml")
	if err := os.WriteFile(path, []byte(httpToolsYAML("one", up.URL+"/one")), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "serve", "--no-workspace", "--config", path, "--listen", "127.0.0.1:0")
	serve := startChild(t, cmd)
	addr, logs := serve.addr, serve.log

	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*testTimeout)
	defer cancel()
	watch, err := c.ToolService().WatchTools(ctx, &toolwirev1.WatchToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) string {
		t.Helper()
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("WatchTools, waiting for %s: %v\n%s", what, err, logs)
		}
		return resp.GetRevision()
	}
	listed := func() ([]string, string) {
		t.Helper()
		resp, err := c.ListTools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tl := range resp.GetTools() {
			got = append(got, tl.GetName())
		}
		return got, resp.GetRevision()
	}
	callTool := func(name string) *toolwirev1.CallResult {
		t.Helper()
		b, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("c", name, nil)}}))
		if err != nil {
			t.Fatal(err)
		}
		return b.Results[0]
	}

	rev1 := next("the current revision")
	if got, rev := listed(); !cmp.Equal(got, []string{"one"}) || rev != rev1 {
		t.Fatalf("ListTools: %v at %s; want [one] at %s", got, rev, rev1)
	}
	if r := callTool("one"); client.Text(r) != "hello from /one" {
		t.Errorf("one: %q", client.Text(r))
	}

	// A batch running when its tool is removed finishes on its snapshot.
	replaceFile(t, path, httpToolsYAML("one", up.URL+"/one")+httpToolsYAML("slow", up.URL+"/slow")[len("http_tools:\n"):])
	next("the revision with slow")
	type outcome struct {
		b   *client.Batch
		err error
	}
	slowDone := make(chan outcome, 1)
	go func() {
		b, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("s", "slow", nil)}}))
		slowDone <- outcome{b, err}
	}()
	<-slowStarted

	replaceFile(t, path, httpToolsYAML("two", up.URL+"/two"))
	rev2 := next("the revision after a rewrite")
	if got, rev := listed(); rev2 == rev1 || !cmp.Equal(got, []string{"two"}) || rev != rev2 {
		t.Fatalf("after a rewrite: %v at %s; want [two] at a new revision %s (was %s)", got, rev, rev2, rev1)
	}
	close(release)
	if o := <-slowDone; o.err != nil || o.b.Results[0].GetIsError() || client.Text(o.b.Results[0]) != "hello from /slow" {
		t.Errorf("the batch running across the reload: %v, %v", o.err, o.b.Results)
	}

	replaceFile(t, path, "http_tools:\n- {name: three, url: 'http://h/{nope}'}\n")
	waitLog(t, logs, "config reload rejected", `tool \"three\"`, "{nope}")
	if got, rev := listed(); !cmp.Equal(got, []string{"two"}) || rev != rev2 {
		t.Errorf("after an invalid config: %v at %s; want [two] at %s", got, rev, rev2)
	}
	if r := callTool("two"); r.GetIsError() || client.Text(r) != "hello from /two" {
		t.Errorf("two after an invalid config: %q", client.Text(r))
	}

	// SIGHUP re-reads the file; the process must not die of it.
	n, rejected := countLines(logs, "config reloaded"), countLines(logs, "config reload rejected")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "SIGHUP: re-reading")
	waitFor(t, "SIGHUP to reject the invalid file again", func() bool { return countLines(logs, "config reload rejected") > rejected })
	replaceFile(t, path, httpToolsYAML("four", up.URL+"/four")+"max_calls: 5\n")
	rev4 := next("the revision after fixing the file")
	waitLog(t, logs, "need a restart", "max_calls")
	if r := callTool("four"); client.Text(r) != "hello from /four" {
		t.Errorf("four: %q", client.Text(r))
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a reload after SIGHUP", func() bool { return countLines(logs, "config reloaded") > n+1 })
	if _, rev := listed(); rev != rev4 {
		t.Errorf("SIGHUP with an unchanged file changed the revision: %s → %s", rev4, rev)
	}

	cancel()
	if _, err := serve.stop(t); err != nil {
		t.Errorf("after SIGTERM: %v\n%s", err, logs)
	}
}

// TestDocsHTTPTools loads the HTTP tools example of docs/sources.md, so the
// documentation stays true.
func TestDocsHTTPTools(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/sources.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## HTTP tools\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("no yaml block in the HTTP tools section of docs/sources.md")
	}
	cfg, _, err := parseServeArgs([]string{"--config", writeFile(t, "toolwire.yaml", block)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := httpsource.Tools(cfg.HTTPTools, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 || !ts[0].Annotations.ReadOnly || ts[2].Annotations.ReadOnly {
		t.Errorf("tools %+v", ts)
	}
}

// TestReloadReadsOnlyAWholeFile: a reload reads the config file only when
// it is a regular file that is not empty. A named pipe put in the file's
// place is rejected at once rather than read (os.ReadFile blocked on it for
// good: no later change, SIGHUP or shutdown got past it), a directory too,
// and a file truncated before it is written again is rejected rather than
// read as a config with no tools; the previous tools stay each time, and
// the next whole file is applied.
func TestReloadReadsOnlyAWholeFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "toolwire.yaml")
	tool := func(name string) string { return httpToolsYAML(name, "http://127.0.0.1:9/"+name) }
	if err := os.WriteFile(path, []byte(tool("one")), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", path}
	cfg, _, err := parseServeArgs(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	stop, err := startSources(t.Context(), args, cfg, sources.New(reg, log), &policy.Live{}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	// A reload blocked on the pipe would keep stop from returning: a writer
	// opening the pipe's other name lets it go, so that the test can fail
	// rather than hang.
	fifo := filepath.Join(dir, "pipe")
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		stop()
	})
	served := func(want ...string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("the tools %v", want), func() bool { return cmp.Equal(reg.Snapshot().Names(), want) })
	}
	rejected := func(why string) {
		t.Helper()
		waitLog(t, logs, "config reload rejected", why)
		if got := reg.Snapshot().Names(); !cmp.Equal(got, []string{"one"}) && !cmp.Equal(got, []string{"two"}) {
			t.Fatalf("after a rejected reload (%s): tools %v", why, got)
		}
	}
	served("one")

	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(fifo, path); err != nil {
		t.Fatal(err)
	}
	rejected("not a regular file but a named pipe")
	served("one")
	replaceFile(t, path, tool("two"))
	served("two")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	rejected("not a regular file but a directory")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(tool("two")), 0o644); err != nil {
		t.Fatal(err)
	}

	// Truncated, then written again: the empty file in between is not a
	// config without tools.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	rejected("is empty")
	served("two")
	if err := os.WriteFile(path, []byte(tool("three")), 0o644); err != nil {
		t.Fatal(err)
	}
	served("three")
}

// TestReloadRejectedMetric: /metrics says whether the config file's last
// reload put it in force: 1 at start, 0 after a file is rejected (the
// previous tools still served), 1 again once a valid file is applied.
func TestReloadRejectedMetric(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", httpToolsYAML("one", "http://127.0.0.1:9/one"))
	s := startServe(t, "--admin-listen", "127.0.0.1:0", "--config", path)
	addr := waitAdminAddr(t, s)
	gauge := regexp.MustCompile(`(?m)^toolwire_config_last_reload_successful(\{[^}]*\})? ([0-9]+)$`)
	waitGauge := func(want string) {
		t.Helper()
		waitFor(t, "toolwire_config_last_reload_successful "+want, func() bool {
			_, body := httpGet(t, "http://"+addr+"/metrics")
			m := gauge.FindStringSubmatch(body)
			return m != nil && m[2] == want
		})
	}
	waitGauge("1")
	replaceFile(t, path, "http_tools:\n- {name: two, url: 'http://h/{nope}'}\n")
	waitLog(t, s.stderr, "config reload rejected")
	waitGauge("0")
	replaceFile(t, path, httpToolsYAML("three", "http://127.0.0.1:9/three"))
	waitLog(t, s.stderr, "config reloaded")
	waitGauge("1")
}
