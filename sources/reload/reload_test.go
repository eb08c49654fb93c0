package reload

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources"
	"github.com/toolwire/toolwire/sources/openapi"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTimeout = 20 * time.Second

// testConfig stands for serve's configuration: the sources, and settings
// only a restart applies.
type testConfig struct {
	sources.Config
	MaxCalls int  `json:"max_calls"`
	Diag     bool `json:"diag"`
}

// loadFile reads path as serve reads its --config file: unknown keys are
// an error.
func loadFile(path string) func() (testConfig, error) {
	return func() (testConfig, error) {
		var cfg testConfig
		b, err := os.ReadFile(path)
		if err == nil {
			err = yaml.UnmarshalStrict(b, &cfg)
		}
		return cfg, err
	}
}

func testOptions(path string, load func() (testConfig, error), log *slog.Logger) Options[testConfig] {
	return Options[testConfig]{
		Path:    path,
		Load:    load,
		Sources: func(c testConfig) sources.Config { return c.Config },
		RestartOnly: func(a, b testConfig) []string {
			if a.MaxCalls != b.MaxCalls {
				return []string{"max_calls"}
			}
			return nil
		},
		Log:      log,
		Debounce: 20 * time.Millisecond,
	}
}

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

// waitFor polls until cond holds, failing t after testTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLog waits for a log line containing every one of want.
func waitLog(t *testing.T, log *logbuf.Buffer, want ...string) {
	t.Helper()
	waitFor(t, "a log line with "+strings.Join(want, ", "), func() bool { return hasLine(log, want...) })
}

// hasLine reports whether a log line contains every one of want.
func hasLine(log *logbuf.Buffer, want ...string) bool {
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
}

// countLines counts the log lines containing s.
func countLines(log *logbuf.Buffer, s string) int {
	return strings.Count(log.String(), s)
}

// testReloader runs a reloader of the config at path over a registry
// holding the diag tools, until the test ends.
func testReloader(t *testing.T, path string) (*tools.Registry, *logbuf.Buffer, chan<- os.Signal) {
	t.Helper()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src := sources.New(reg, log)
	r := newReloader(src, testOptions(path, loadFile(path), log))
	cfg, err := r.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.start(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	w := r.openWatcher()
	go func() { defer close(done); r.run(ctx, w, hup) }()
	t.Cleanup(func() {
		cancel()
		<-done
		src.Close()
	})
	return reg, logs, hup
}

// waitChange waits for the registry to change after changed was taken.
func waitChange(t *testing.T, changed <-chan struct{}, logs *logbuf.Buffer, what string) {
	t.Helper()
	select {
	case <-changed:
	case <-time.After(testTimeout):
		t.Fatalf("the registry did not change after %s; log:\n%s", what, logs)
	}
}

func names(reg *tools.Registry) []string {
	var out []string
	for _, n := range reg.Snapshot().Names() {
		if n != "echo" && n != "sleep" && n != "fail" {
			out = append(out, n)
		}
	}
	return out
}

// TestReloader rewrites a watched config file in the ways people do and
// checks what is served after each.
func TestReloader(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "toolwire.yaml")
	if err := os.WriteFile(path, []byte(httpToolsYAML("one", "http://127.0.0.1:1/one")), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, logs, hup := testReloader(t, path)
	if diff := cmp.Diff([]string{"one"}, names(reg)); diff != "" {
		t.Fatalf("at start (-want +got):\n%s", diff)
	}
	tool, _ := reg.Snapshot().Lookup("one")
	if tool.Source != tools.SourceHTTP || !tool.Annotations.ReadOnly {
		t.Errorf("one = %+v", tool)
	}

	changed := reg.Changed()
	replaceFile(t, path, httpToolsYAML("two", "http://127.0.0.1:1/two"))
	waitChange(t, changed, logs, "renaming a new file into place")
	if diff := cmp.Diff([]string{"two"}, names(reg)); diff != "" {
		t.Errorf("after rename (-want +got):\n%s", diff)
	}
	waitLog(t, logs, "config reloaded", `"two"`)

	rev := reg.Snapshot().Revision()
	for _, bad := range []struct{ yaml, want string }{
		{"http_tools:\n- {name: bad, url: 'http://x/{id}'}\n", `tool \"bad\": url: placeholder {id} is not a property declared in parameters`},
		{"http_tools:\n- {name: echo, url: 'http://x/'}\n", `tool \"echo\": the name is taken`},
		{"http_tools: [\n", "config reload rejected"},
		{"http_toolz: []\n", "http_toolz"},
	} {
		replaceFile(t, path, bad.yaml)
		waitLog(t, logs, "config reload rejected", bad.want)
		if got := reg.Snapshot().Revision(); got != rev {
			t.Errorf("after an invalid config (%q) the revision changed", bad.yaml)
		}
	}
	if diff := cmp.Diff([]string{"two"}, names(reg)); diff != "" {
		t.Errorf("after invalid configs (-want +got):\n%s", diff)
	}

	changed = reg.Changed()
	// Written in place, as "echo ... > file" does.
	if err := os.WriteFile(path, []byte(httpToolsYAML("three", "http://127.0.0.1:1/3")+"max_calls: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changed, logs, "writing the file in place")
	waitLog(t, logs, "need a restart", "max_calls")
	if diff := cmp.Diff([]string{"three"}, names(reg)); diff != "" {
		t.Errorf("after writing in place (-want +got):\n%s", diff)
	}

	n := countLines(logs, "config reloaded")
	hup <- syscall.SIGHUP
	waitLog(t, logs, "SIGHUP")
	waitFor(t, "a reload after SIGHUP", func() bool { return countLines(logs, "config reloaded") > n })

	changed = reg.Changed()
	replaceFile(t, path, "diag: true\n")
	waitChange(t, changed, logs, "removing every HTTP tool")
	if got := names(reg); len(got) != 0 {
		t.Errorf("after removing http_tools: %v", got)
	}
}

// TestReloaderConfigMap swaps a Kubernetes ConfigMap's ..data symlink, as
// the kubelet does on an update: the config file's own path never changes.
func TestReloaderConfigMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "toolwire.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", httpToolsYAML("one", "http://127.0.0.1:1/"))
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "toolwire.yaml")
	if err := os.Symlink(filepath.Join("..data", "toolwire.yaml"), path); err != nil {
		t.Fatal(err)
	}
	reg, logs, _ := testReloader(t, path)
	if diff := cmp.Diff([]string{"one"}, names(reg)); diff != "" {
		t.Fatalf("at start (-want +got):\n%s", diff)
	}

	changed := reg.Changed()
	version("..v2", httpToolsYAML("two", "http://127.0.0.1:1/"))
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, "..v1"))
	waitChange(t, changed, logs, "swapping ..data")
	if diff := cmp.Diff([]string{"two"}, names(reg)); diff != "" {
		t.Errorf("after the swap (-want +got):\n%s", diff)
	}
}

// TestReloaderAllOrNothing: when one source rejects the new config, no
// source applies it, nothing changes in the registry and no restart is
// reported; the next valid config applies, and the settings outside the
// sources it changes are reported as needing a restart.
func TestReloaderAllOrNothing(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	cfgs := []string{
		httpToolsYAML("one", "http://127.0.0.1:1/"),
		// Valid HTTP tools, an invalid MCP server, and a setting that
		// needs a restart: none of it may take.
		httpToolsYAML("two", "http://127.0.0.1:1/") + "mcp_servers:\n- name: x\nmax_calls: 2\n",
		httpToolsYAML("three", "http://127.0.0.1:1/") + "max_calls: 3\n",
	}
	next := 0
	load := func() (testConfig, error) {
		var cfg testConfig
		err := yaml.UnmarshalStrict([]byte(cfgs[next]), &cfg)
		next++
		return cfg, err
	}
	logs := &logbuf.Buffer{}
	src := sources.New(reg, nil)
	defer src.Close()
	r := newReloader(src, testOptions("", load, slog.New(slog.NewJSONHandler(logs, nil))))
	cfg, _ := r.Load()
	if err := r.start(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	rev := reg.Snapshot().Revision()
	if err := r.Reload(false); err == nil || !hasLine(logs, "config reload rejected", `mcp server \"x\": set command`) {
		t.Errorf("Reload: %v; want the rejection logged\n%s", err, logs)
	}
	if got := reg.Snapshot().Revision(); got != rev || !cmp.Equal(names(reg), []string{"one"}) {
		t.Errorf("after a rejected config: %v at %s; want [one] at %s", names(reg), got, rev)
	}
	if strings.Contains(logs.String(), "need a restart") {
		t.Errorf("a rejected config reported settings needing a restart:\n%s", logs)
	}
	if err := r.Reload(false); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"three"}, names(reg)); diff != "" {
		t.Errorf("after a valid config (-want +got):\n%s", diff)
	}
	if !hasLine(logs, "need a restart", `"settings":["max_calls"]`) {
		t.Errorf("max_calls changed, and no line says it needs a restart:\n%s", logs)
	}
}

// TestStartInvalid: an invalid config at start is an error naming the
// file, and the sources are closed.
func TestStartInvalid(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	var cfg testConfig
	if err := yaml.UnmarshalStrict([]byte("mcp_servers:\n- name: x\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	stop, err := Start(t.Context(), sources.New(reg, nil), cfg, testOptions("/etc/toolwire.yaml", nil, nil))
	if err == nil || !strings.Contains(err.Error(), "config /etc/toolwire.yaml: ") || !strings.Contains(err.Error(), `mcp server "x": set command`) {
		t.Errorf("Start: %v; want an error naming the file and the server", err)
	}
	if stop != nil {
		t.Error("Start failed and returned a stop function")
	}
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

	path := filepath.Join(t.TempDir(), "toolwire.yaml")
	if err := os.WriteFile(path, []byte("mcp_servers:\n  - name: old\n    url: "+web.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, logs, _ := testReloader(t, path)
	waitFor(t, "the MCP server's tools", func() bool { _, ok := reg.Snapshot().Lookup("old_ping"); return ok })

	replaceFile(t, path, httpToolsYAML("fresh", web.URL)+"mcp_servers: []\n")
	waitLog(t, logs, `"msg":"config reloaded"`)
	for line := range strings.Lines(logs.String()) {
		if !strings.Contains(line, `"msg":"config reloaded"`) {
			continue
		}
		if !strings.Contains(line, `"http_tools":["fresh"],"openapi":[],"mcp_servers":[],"remotes":[],"grpc_services":[]`) || strings.Contains(line, "old") {
			t.Errorf("config reloaded line:\n%s\nwant the new config's sources, and nothing of the removed server", line)
		}
	}
}

// TestReloaderDocuments: an OpenAPI document the config names by a path
// relative to the working directory, as the config's own is, is watched:
// an edit of it alone swaps the tools.
func TestReloaderDocuments(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	doc := "openapi: 3.1.0\ninfo: {title: d, version: '1'}\npaths:\n  /a:\n    get: {operationId: first, responses: {'200': {description: ok}}}\n"
	if err := os.WriteFile("api.yaml", []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("toolwire.yaml", []byte("openapi:\n- {name: d, spec: api.yaml, base_url: 'http://127.0.0.1:9'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, logs, _ := testReloader(t, "toolwire.yaml")
	if got := names(reg); !slices.Equal(got, []string{"d_first"}) {
		t.Fatalf("tools %v", got)
	}
	changed := reg.Changed()
	replaceFile(t, "api.yaml", strings.ReplaceAll(doc, "first", "second"))
	waitChange(t, changed, logs, "editing the document")
	if got := names(reg); !slices.Equal(got, []string{"d_second"}) {
		t.Errorf("after editing the document: %v", got)
	}
	replaceFile(t, "api.yaml", strings.ReplaceAll(doc, "first", "third"))
	waitFor(t, "the reload of the third version", func() bool { return slices.Equal(names(reg), []string{"d_third"}) })
	if !hasLine(logs, "config reloaded", `"openapi":["d"]`) {
		t.Errorf("no config reloaded line:\n%s", logs)
	}
}

// TestIsDoc: which file events are a document's.
func TestIsDoc(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	r := newReloader[testConfig](nil, testOptions("toolwire.yaml", nil, nil))
	r.setDocs(testConfig{Config: sources.Config{OpenAPI: []openapi.Config{{Name: "a", Spec: "specs/api.yaml"}, {Name: "b", Spec: "https://x/api.yaml"}}}})
	for name, want := range map[string]bool{
		"specs/api.yaml":                         true,
		filepath.Join(dir, "specs", "api.yaml"):  true,
		"specs/../specs/api.yaml":                true,
		"specs/..data":                           true,
		"specs/other.yaml":                       false,
		"api.yaml":                               false,
		"toolwire.yaml":                          false,
		filepath.Join(dir, "specs", "api.yaml~"): false,
	} {
		if got := r.isDoc(name); got != want {
			t.Errorf("isDoc(%q) = %v; want %v", name, got, want)
		}
	}
}

// TestStopEndsAReloadsChecks: stopping the reloader while a reload checks
// an OpenAPI document whose server does not answer cancels the fetch; the
// check used to fetch with a context of its own, so stop (and serve's
// shutdown behind it) waited out the fetch's 30 s timeout, one document
// after another.
func TestStopEndsAReloadsChecks(t *testing.T) {
	t.Parallel()
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })

	path := filepath.Join(t.TempDir(), "toolwire.yaml")
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	stop, err := Start(t.Context(), sources.New(reg, log), testConfig{}, testOptions(path, loadFile(path), log))
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, path, "openapi:\n- {name: a, spec: '"+hang.URL+"/a.json'}\n- {name: b, spec: '"+hang.URL+"/b.json'}\n")
	select {
	case <-asked:
	case <-time.After(testTimeout):
		t.Fatal("the reload did not fetch the document")
	}
	stop()
	if !hasLine(logs, "config reload rejected", "context canceled") || hasLine(logs, "deadline exceeded") {
		t.Errorf("after stop during a reload's fetch, want the reload rejected as cancelled, not timed out; log:\n%s", logs)
	}
}

// TestReloaderLinkToConfigMap: a config path that is a link to a mounted
// ConfigMap's file (itself a link through ..data) follows every update of
// the ConfigMap. Only the path's own directory and the file's first real
// one were watched, so the first swap was seen (its directory went) and
// every later one was not.
func TestReloaderLinkToConfigMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cm := filepath.Join(dir, "cm")
	if err := os.Mkdir(cm, 0o755); err != nil {
		t.Fatal(err)
	}
	version := func(v, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(cm, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cm, v, "toolwire.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", httpToolsYAML("v1", "http://127.0.0.1:1/"))
	if err := os.Symlink("..v1", filepath.Join(cm, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "toolwire.yaml"), filepath.Join(cm, "toolwire.yaml")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "toolwire.yaml")
	if err := os.Symlink(filepath.Join("cm", "toolwire.yaml"), path); err != nil {
		t.Fatal(err)
	}
	reg, logs, _ := testReloader(t, path)
	for i := 2; i <= 4; i++ {
		v := fmt.Sprintf("v%d", i)
		changed := reg.Changed()
		version(".."+v, httpToolsYAML(v, "http://127.0.0.1:1/"))
		if err := os.Symlink(".."+v, filepath.Join(cm, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(cm, "..data_tmp"), filepath.Join(cm, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(cm, fmt.Sprintf("..v%d", i-1))); err != nil {
			t.Fatal(err)
		}
		waitChange(t, changed, logs, "swapping ..data to .."+v)
		if diff := cmp.Diff([]string{v}, names(reg)); diff != "" {
			t.Fatalf("after the swap to ..%s (-want +got):\n%s", v, diff)
		}
	}
}

// TestReloaderEventsLost: when the kernel drops the directories' events
// (its queue overflowed while a reload ran: a busy directory, a slow
// check), the reload that follows reads the documents again too, since
// the event of a document's change may be among those lost. The events
// that were not lost reloaded the config alone, which had not changed,
// so the new document waited for its next event or SIGHUP.
func TestReloaderEventsLost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "toolwire.yaml")
	doc := filepath.Join(dir, "api.yaml")
	api := "openapi: 3.1.0\ninfo: {title: d, version: '1'}\npaths:\n  /a:\n    get: {operationId: first, responses: {'200': {description: ok}}}\n"
	if err := os.WriteFile(doc, []byte(api), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("openapi:\n- {name: d, spec: '"+doc+"', base_url: 'http://127.0.0.1:9'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// A reload that takes its time (as a check fetching a document does)
	// until released.
	held, release := make(chan struct{}), make(chan struct{})
	var hold sync.Once
	load := func() (testConfig, error) {
		hold.Do(func() { close(held); <-release })
		return loadFile(path)()
	}
	src := sources.New(reg, log)
	cfg, err := loadFile(path)()
	if err != nil {
		t.Fatal(err)
	}
	stop, err := Start(t.Context(), src, cfg, testOptions(path, load, log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if got := names(reg); !slices.Equal(got, []string{"d_first"}) {
		t.Fatalf("tools %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "touch"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-held
	// More events than the kernel queues (fs.inotify.max_queued_events,
	// 16384 by default) while the reload runs, then the document's change.
	for i := range 20000 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("busy-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	replaceFile(t, doc, strings.ReplaceAll(api, "first", "second"))
	close(release)
	waitLog(t, logs, "queue or buffer overflow")
	waitFor(t, "the tools of the changed document", func() bool { return slices.Equal(names(reg), []string{"d_second"}) })
}
