package mcpsource

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
	"github.com/toolwire/toolwire/tools"
)

func TestDeclaration(t *testing.T) {
	t.Parallel()
	no := false
	yes := true
	for _, tc := range []struct {
		name    string
		tool    *mcp.Tool
		want    tools.Annotations
		schema  string
		title   string
		wantErr string
	}{
		{name: "no annotations: MCP defaults", tool: &mcp.Tool{Name: "a", InputSchema: map[string]any{"type": "object"}},
			want: tools.Annotations{Destructive: true, OpenWorld: true}, schema: `{"type":"object"}`},
		{name: "read-only is not destructive", tool: &mcp.Tool{Name: "a", InputSchema: map[string]any{"type": "object"},
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no, Title: "A"}},
			want: tools.Annotations{ReadOnly: true, Idempotent: true}, schema: `{"type":"object"}`, title: "A"},
		{name: "explicit hints", tool: &mcp.Tool{Name: "a", Title: "T", InputSchema: map[string]any{"type": "object"},
			Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes, Title: "ignored"}},
			want: tools.Annotations{OpenWorld: true}, schema: `{"type":"object"}`, title: "T"},
		{name: "root type added", tool: &mcp.Tool{Name: "a", InputSchema: map[string]any{"properties": map[string]any{"x": map[string]any{"type": "string"}}}},
			want: tools.Annotations{Destructive: true, OpenWorld: true}, schema: `{"properties":{"x":{"type":"string"}},"type":"object"}`},
		{name: "root type array", tool: &mcp.Tool{Name: "a", InputSchema: map[string]any{"type": "array"}},
			wantErr: `root type array`},
		{name: "schema not an object", tool: &mcp.Tool{Name: "a", InputSchema: true}, wantErr: "not a JSON object"},
		{name: "schema that does not compile", tool: &mcp.Tool{Name: "a", InputSchema: map[string]any{"type": "object", "minLength": "x"}},
			wantErr: "input schema"},
		{name: "bad name", tool: &mcp.Tool{Name: "a b", InputSchema: map[string]any{"type": "object"}}, wantErr: "does not match"},
		{name: "name too long", tool: &mcp.Tool{Name: strings.Repeat("x", 126), InputSchema: map[string]any{"type": "object"}}, wantErr: "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := declaration("srv", tc.tool, func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }, &tools.SchemaCache{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Name != "srv_a" || d.Source != tools.SourceMCP || d.Annotations != tc.want || string(d.InputSchema) != tc.schema || d.Title != tc.title {
				t.Errorf("got name %q source %v annotations %+v schema %s title %q; want annotations %+v schema %s title %q",
					d.Name, d.Source, d.Annotations, d.InputSchema, d.Title, tc.want, tc.schema, tc.title)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  ServerConfig
		want string
	}{
		{ServerConfig{Name: "a.b", Command: "x"}, "name must match"},
		{ServerConfig{Name: "a"}, "set command"},
		{ServerConfig{Name: "a", Command: "x", URL: "http://h"}, "not both"},
		{ServerConfig{Name: "a", URL: "ftp://h"}, "http or https"},
		{ServerConfig{Name: "a", URL: "http://h", Env: map[string]string{"A": "b"}}, "for stdio"},
		{ServerConfig{Name: "a", Command: "x", Headers: map[string]string{"A": "b"}}, "for streamable HTTP"},
		{ServerConfig{Name: "a", URL: "http://h", Headers: map[string]string{"A": "{{9}}"}}, "bad environment variable name"},
		{ServerConfig{Name: "a", URL: "http://h", Headers: map[string]string{"Authorization": "Bearer {TOKEN}"}}, `header Authorization: {TOKEN} would be sent as it is written; an environment variable is written {{TOKEN}}`},
		{ServerConfig{Name: "a", URL: "http://h", ReconnectTimeout: -time.Second}, "reconnect_timeout -1s: want from 0 (the default, 2s) to 1m0s"},
		{ServerConfig{Name: "a", URL: "http://h", ReconnectTimeout: time.Hour}, "reconnect_timeout 1h0m0s: want from 0"},
		{ServerConfig{Name: "a", Command: "x", ReconnectTimeout: time.Second}, "reconnect_timeout is for streamable HTTP servers"},
		{ServerConfig{Name: "a", URL: "http://h", PingTimeout: time.Second}, "ping_timeout is for stdio servers (command); a streamable HTTP server's pings wait reconnect_timeout"},
		{ServerConfig{Name: "a", Command: "x", PingTimeout: -time.Second}, "ping_timeout -1s: want from 0 (the default, 10s) to 5m0s"},
		{ServerConfig{Name: "a", Command: "x", PingTimeout: time.Hour}, "ping_timeout 1h0m0s: want from 0"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (ServerConfig{Name: "a", URL: "http://h", ReconnectTimeout: time.Minute}).Validate(); err != nil {
		t.Errorf("a reconnect_timeout of a minute: %v", err)
	}
	if err := (ServerConfig{Name: "a", Command: "x", PingTimeout: 5 * time.Minute}).Validate(); err != nil {
		t.Errorf("a ping_timeout of five minutes: %v", err)
	}
	if err := ValidateAll([]ServerConfig{{Name: "a", Command: "x"}, {Name: "a", URL: "http://h"}}); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("duplicate names: %v", err)
	}
	g, reg := newGateway(t)
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "bad name", Command: "x"}}); err == nil {
		t.Error("Sync accepted an invalid config")
	}
	if reg.Snapshot().Len() != 0 {
		t.Error("an invalid Sync changed the registry")
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Sync(done, []ServerConfig{{Name: "a", Command: stdioServer}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Sync with a done context: %v", err)
	}
	if g.set.Len() != 0 {
		t.Error("Sync with a done context started a server")
	}
}

// checkCalls runs every test tool of the server with prefix p.
func checkCalls(t *testing.T, snap *tools.Snapshot, p string) {
	t.Helper()
	ctx := context.Background()

	read, _ := snap.Lookup(p + "_read")
	if want := (tools.Annotations{ReadOnly: true, Idempotent: true}); read.Annotations != want || read.Title != "Read" ||
		read.Description != "Returns the text." || len(read.OutputSchema) == 0 || read.Source != tools.SourceMCP {
		t.Errorf("read declared as %+v", read)
	}
	if slow, _ := snap.Lookup(p + "_slow"); slow.Annotations != (tools.Annotations{OpenWorld: true}) {
		t.Errorf("slow annotations %+v, want open world only (destructiveHint false)", slow.Annotations)
	}
	if img, _ := snap.Lookup(p + "_image"); img.Annotations != (tools.Annotations{Destructive: true, OpenWorld: true}) {
		t.Errorf("image annotations %+v, want MCP's defaults", img.Annotations)
	}

	r := call(t, ctx, snap, p+"_read", `{"text":"hi"}`, nil)
	if r.IsError || text(r) != `{"text":"hi"}` || string(r.StructuredContent) != `{"text":"hi"}` {
		t.Errorf("read: %+v (text %q, structured %s)", r, text(r), r.StructuredContent)
	}

	rec := newRecorder()
	r = call(t, ctx, snap, p+"_progress", `{"steps":3}`, rec)
	if r.IsError || text(r) != "done" {
		t.Errorf("progress result: %q", text(r))
	}
	rec.mu.Lock()
	var steps []float64
	for _, p := range rec.got {
		if p.Progress == nil || p.Total == nil || *p.Total != 3 || p.Message != "step" {
			t.Errorf("progress report %+v", p)
			continue
		}
		steps = append(steps, *p.Progress)
	}
	rec.mu.Unlock()
	// Every report the server sent before its result, in order.
	if !slices.Equal(steps, []float64{1, 2, 3}) {
		t.Errorf("progress steps %v, want [1 2 3]", steps)
	}

	r = call(t, ctx, snap, p+"_image", `{}`, nil)
	if r.IsError || len(r.Content) != 3 || !bytes.Equal(r.Content[0].Data, testserver.PNG) || r.Content[0].MIMEType != "image/png" ||
		!strings.Contains(r.Content[1].Text, "audio") || !strings.Contains(r.Content[2].Text, "resource link: file:///tmp/x.txt") {
		t.Errorf("image: %+v", r)
	}

	r = call(t, ctx, snap, p+"_fail", `{"text":"broken"}`, nil)
	if !r.IsError || text(r) != "broken" {
		t.Errorf("fail: %+v", r)
	}
}

func TestStdioServer(t *testing.T) {
	g, reg := newGateway(t)
	dir := t.TempDir()
	pidfile, cancelfile := filepath.Join(dir, "pid"), filepath.Join(dir, "cancelled")
	t.Setenv("MCPGW_TEST_CANCELFILE", cancelfile)
	err := g.Sync(context.Background(), []ServerConfig{{Name: "io", Command: stdioServer, Env: map[string]string{
		"TESTSERVER_PIDFILE": pidfile, "TESTSERVER_CANCELFILE": "{{MCPGW_TEST_CANCELFILE}}"}}})
	if err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the stdio server's tools", sourcetest.Has(prefixed("io", testTools...)...))
	if snap.Len() != len(testTools) {
		t.Errorf("tools %v", snap.Names())
	}
	checkCalls(t, snap, "io")

	// Cancellation reaches the child process's handler.
	ctx, cancel := context.WithCancel(context.Background())
	rec := newRecorder()
	done := make(chan *tools.Result)
	go func() { done <- call(t, ctx, snap, "io_slow", `{}`, rec) }()
	select {
	case <-rec.ch:
	case <-time.After(waitLimit):
		t.Fatal("the slow call did not start")
	}
	cancel()
	if r := <-done; !r.IsError {
		t.Errorf("cancelled call: %+v", r)
	}
	for limit := time.Now().Add(waitLimit); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(cancelfile); string(b) == "cancelled" {
			break
		}
		if time.Now().After(limit) {
			t.Fatal("the stdio server's handler did not see the cancellation")
		}
	}

	pid := readPID(t, pidfile)
	g.Close()
	if n := reg.Snapshot().Len(); n != 0 {
		t.Errorf("%d tools left after Close", n)
	}
	// Close waited for the process: it is gone, not even a zombie.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server process %d after Close: kill(0) = %v, want ESRCH", pid, err)
	}
}

func readPID(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestHTTPServer(t *testing.T) {
	started, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := newHTTPServer(t, testserver.Hooks{
		SlowStarted:   func() { started <- struct{}{} },
		SlowCancelled: func() { cancelled <- struct{}{} },
	})
	t.Setenv("MCPGW_TEST_TOKEN", "tok-123")
	g, reg := newGateway(t)
	logs := &logbuf.Buffer{}
	g.log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if strings.Contains(logs.String(), "tok-123") {
			t.Errorf("the header's secret is in the log:\n%s", logs)
		}
	}()
	err := g.Sync(context.Background(), []ServerConfig{{Name: "web", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer {{MCPGW_TEST_TOKEN}}"}}})
	if err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the HTTP server's tools", sourcetest.Has(prefixed("web", testTools...)...))
	checkCalls(t, snap, "web")
	srv.mu.Lock()
	for _, a := range srv.auth {
		if a != "Bearer tok-123" {
			t.Errorf("request with Authorization %q", a)
		}
	}
	srv.mu.Unlock()

	t.Run("cancellation reaches the server", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *tools.Result)
		go func() { done <- call(t, ctx, snap, "web_slow", `{}`, nil) }()
		sourcetest.Wait(t, started, "the slow tool to start")
		cancel()
		sourcetest.Wait(t, cancelled, "the server-side handler's context to be cancelled")
		if r := <-done; !r.IsError || !strings.Contains(text(r), "context canceled") {
			t.Errorf("cancelled call: %q", text(r))
		}
	})

	t.Run("list_changed", func(t *testing.T) {
		before := reg.Snapshot().Revision()
		srv.mcp.AddTool(&mcp.Tool{Name: "added", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "new"}}}, nil
			})
		snap := sourcetest.WaitTools(t, reg, "the added tool", sourcetest.Has("web_added"))
		if snap.Revision() == before {
			t.Error("revision unchanged")
		}
		if r := call(t, context.Background(), snap, "web_added", `{}`, nil); text(r) != "new" {
			t.Errorf("added tool: %q", text(r))
		}
		srv.mcp.RemoveTools("added")
		sourcetest.WaitTools(t, reg, "the removed tool to go", func(n []string) bool {
			return !slices.Contains(n, "web_added") && sourcetest.Has(prefixed("web", testTools...)...)(n)
		})
	})

	t.Run("sync restarts a changed server", func(t *testing.T) {
		t.Setenv("MCPGW_TEST_TOKEN2", "tok-456")
		err := g.Sync(context.Background(), []ServerConfig{{Name: "web", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer {{MCPGW_TEST_TOKEN2}}"}}})
		if err != nil {
			t.Fatal(err)
		}
		// The old session's tools go before the new one's arrive; wait for
		// them to come from a session made with the new header. (Not "the
		// last request had it": the old session is closed in the
		// background, and its last request may come after the new listing.)
		// A request with the new header seen before the snapshot is taken
		// means the old tools are gone from it.
		for limit := time.After(waitLimit); ; {
			changed := reg.Changed()
			srv.mu.Lock()
			restarted := slices.Contains(srv.auth, "Bearer tok-456")
			srv.mu.Unlock()
			if restarted && sourcetest.Has(prefixed("web", testTools...)...)(reg.Snapshot().Names()) {
				break
			}
			select {
			case <-changed:
			case <-limit:
				t.Fatalf("waiting for the restarted server's tools: tools are %v", reg.Snapshot().Names())
			}
		}
		snap := reg.Snapshot()
		if r := call(t, context.Background(), snap, "web_read", `{"text":"again"}`, nil); r.IsError {
			t.Errorf("after restart: %q", text(r))
		}
	})

	t.Run("sync removes", func(t *testing.T) {
		if err := g.Sync(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		sourcetest.WaitTools(t, reg, "the tools to go", none("web_"))
	})
}

func TestDownAtStart(t *testing.T) {
	srv := newHTTPServer(t, testserver.Hooks{})
	srv.down(true)
	g, reg := newGateway(t)
	logs := &logbuf.Buffer{}
	g.log = slog.New(slog.NewTextHandler(logs, nil))
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "late", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	// Two failed attempts while down: it is retried, and offers nothing.
	for limit := time.Now().Add(waitLimit); strings.Count(logs.String(), "retrying") < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("no retries logged:\n%s", logs)
		}
	}
	if !strings.Contains(logs.String(), "Service Unavailable") {
		t.Errorf("the log does not say why the server is unavailable:\n%s", logs)
	}
	before := reg.Snapshot()
	if before.Len() != 0 {
		t.Fatalf("tools while down: %v", before.Names())
	}
	srv.down(false)
	snap := sourcetest.WaitTools(t, reg, "the tools once the server is up", sourcetest.Has(prefixed("late", testTools...)...))
	if snap.Revision() == before.Revision() {
		t.Error("revision unchanged")
	}
	if r := call(t, context.Background(), snap, "late_read", `{"text":"up"}`, nil); r.IsError {
		t.Errorf("read: %q", text(r))
	}
}

// TestHTTPServerGoesAway: when an HTTP server stops answering, its session
// ends and its tools go; they return when it answers again.
func TestHTTPServerGoesAway(t *testing.T) {
	srv := newHTTPServer(t, testserver.Hooks{})
	g, reg := newGateway(t)
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "away", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("away_read"))
	srv.down(true)
	srv.CloseClientConnections()
	sourcetest.WaitTools(t, reg, "the tools to go", none("away_"))
	srv.down(false)
	sourcetest.WaitTools(t, reg, "the tools to come back", sourcetest.Has(prefixed("away", testTools...)...))
}

func TestStdioCrash(t *testing.T) {
	t.Parallel()
	g, reg := newGateway(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "crash", Command: stdioServer, Env: map[string]string{"TESTSERVER_PIDFILE": pidfile}}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the stdio server's tools", sourcetest.Has("crash_slow"))
	pid := readPID(t, pidfile)

	rec := newRecorder()
	done := make(chan *tools.Result)
	go func() { done <- call(t, context.Background(), snap, "crash_slow", `{}`, rec) }()
	select {
	case <-rec.ch: // the call is running on the server
	case <-time.After(waitLimit):
		t.Fatal("the slow call did not start")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var r *tools.Result
	select {
	case r = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the call in flight hangs after the server crashed")
	}
	if !r.IsError || !strings.Contains(text(r), `MCP server "crash"`) {
		t.Errorf("call in flight: %+v %q", r, text(r))
	}
	// The server is restarted and its tools come back.
	sourcetest.WaitTools(t, reg, "the tools to go", none("crash_"))
	snap = sourcetest.WaitTools(t, reg, "the tools to come back", sourcetest.Has(prefixed("crash", testTools...)...))
	if readPID(t, pidfile) == pid {
		t.Error("pid file unchanged: no new process")
	}
	if r := call(t, context.Background(), snap, "crash_read", `{"text":"again"}`, nil); r.IsError {
		t.Errorf("after restart: %q", text(r))
	}
}

// TestNameTaken: a tool whose name another source holds is skipped; the
// server's other tools are offered.
func TestNameTaken(t *testing.T) {
	srv := newHTTPServer(t, testserver.Hooks{})
	g, reg := newGateway(t)
	builtin := tools.Tool{Name: "web_read", Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text("builtin"), nil }}
	if err := reg.Add(builtin); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "web", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the other tools", sourcetest.Has(prefixed("web", testTools...)...))
	if r := call(t, context.Background(), snap, "web_read", `{}`, nil); text(r) != "builtin" {
		t.Errorf("web_read was replaced: %q", text(r))
	}
	g.Close()
	if _, ok := reg.Snapshot().Lookup("web_read"); !ok || reg.Snapshot().Len() != 1 {
		t.Errorf("after Close: %v; want the builtin web_read alone", reg.Snapshot().Names())
	}
}

// TestSchemasCompiledOnce: a listing's tools share one schema cache, and
// a declaration is compiled, so the registry does not compile it again:
// each tool compiled its schemas alone, and the registry again, so 4000
// tools declaring one 6.5 KB schema took 22 s of CPU at every listing.
// Counted in allocations: declaring a tool whose schemas the listing has
// compiled already costs a small part of compiling them.
func TestSchemasCompiledOnce(t *testing.T) { // not parallel: AllocsPerRun
	props := map[string]any{}
	for i := range 60 {
		props["field_"+strconv.Itoa(i)] = map[string]any{"type": "string", "description": "a field", "maxLength": 100}
	}
	schema := map[string]any{"type": "object", "properties": props}
	h := func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }
	declare := func(name string, schemas *tools.SchemaCache) tools.Tool {
		d, err := declaration("srv", &mcp.Tool{Name: name, InputSchema: schema, OutputSchema: schema}, h, schemas)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := testing.AllocsPerRun(3, func() { declare("first", &tools.SchemaCache{}) })
	listing := &tools.SchemaCache{}
	declare("first", listing)
	var d tools.Tool
	next := testing.AllocsPerRun(3, func() { d = declare("next", listing) })
	if next > first/4 {
		t.Errorf("declaring a tool of the listing's schema took %.0f allocations, the first %.0f; want its schemas compiled once, for the first", next, first)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if update := testing.AllocsPerRun(3, func() { _ = reg.Update([]string{"srv_next"}, d) }); update > first/4 {
		t.Errorf("adding the declaration to a registry took %.0f allocations, a compile %.0f; want none compiled again", update, first)
	}
}
