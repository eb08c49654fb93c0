package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"github.com/toolwire/toolwire/sources/remote"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"github.com/toolwire/toolwire/tools/runcommand"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
	"github.com/toolwire/toolwire/tools/workspacetools"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestBuiltinsStopWhenCancelled (issue 11 §1) gives every built-in tool,
// served by a real server over loopback TCP, an input that keeps it busy or
// once did, and ends the call mid-work by its timeout or by cancelling the
// RPC. Each call returns: the result arrives (TIMEOUT, or the bounded
// result the input now gets), the server's abandoned counter stays 0, and
// the goroutines go back to their count before the call. The tools behind
// the forwarding built-ins are real: an HTTP server that never answers, a
// second toolwire server (remote), the MCP test server as a child process
// over stdio, and an MCP server over streamable HTTP.
//
// The servers keep their default abandon grace (2 s), not the 100 ms that
// the invariant promises: past 100 ms, on a loaded 2-core CI machine, is
// where the OS's scheduling of the server, its children (run_command's
// command, the sandbox supervisor, the MCP server) and the race detector
// lands a tool that stopped at once, so a 100 ms watchdog here flaked
// without any defect in our code. What a grace hides is a tool that stops
// late by design; those are caught otherwise:
//   - a tool that does not watch its context (the find_files brace bomb on
//     main before issue 11: minutes of walking) overruns any grace and is
//     abandoned here;
//   - a tool that waits out a timer of its own after cancellation (run_command
//     waiting for its kill grace before today) is caught by the case
//     "run_command ignoring SIGTERM", served with a kill grace of 5 s;
//   - the 100 ms figure itself is measured, per case, from the server's side
//     by BenchmarkBuiltinsCancelLatency (the result's duration less the
//     call's timeout), without timing in a test.
func TestBuiltinsStopWhenCancelled(t *testing.T) {
	eng, c := builtinsServer(t)
	// One quick call through each connection first, so that goroutines a
	// connection starts on first use are in the baseline.
	warmUp(t, c)
	baseline := settledGoroutines()
	var abandoned int64 // the server's count so far, each case's own failure
	for _, how := range []string{"timeout", "rpc cancel"} {
		for _, tt := range cancelCases {
			if how == "rpc cancel" && tt.outcome == result {
				continue // nothing to cancel: the result comes at once
			}
			t.Run(how+"/"+tt.name, func(t *testing.T) {
				call := &toolwirev1.ToolCall{CallId: "c", Name: tt.tool, Arguments: tt.args}
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				switch how {
				case "timeout":
					call.Timeout = durationpb.New(callTimeout)
					if tt.outcome == result {
						call.Timeout = durationpb.New(30 * time.Second) // what the input gets is the point
					}
				default:
					time.AfterFunc(callTimeout, cancel)
				}
				res, rpcErr := callOne(ctx, c, call)
				kind, text := res.GetErrorKind(), client.Text(res)
				switch {
				case how == "rpc cancel" && tt.outcome != result:
					// The stream ends with the cancellation; the server
					// still ends the call, which the goroutines show.
					if res == nil && status.Code(rpcErr) != codes.Canceled {
						t.Errorf("stream ended with %v; want it cancelled", rpcErr)
					}
				case rpcErr != nil || res == nil:
					t.Fatalf("no result: %v", rpcErr)
				case tt.outcome == stopped && kind != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT:
					t.Errorf("result %s %q; want TIMEOUT", kind, text)
				case tt.outcome == result && !strings.Contains(text, tt.want):
					t.Errorf("result %s %q; want it to say %q", kind, text, tt.want)
				case strings.Contains(text, "abandoned"):
					t.Errorf("result %s %q; the tool was abandoned", kind, text)
				}
				if n := waitGoroutines(baseline); n > baseline {
					t.Errorf("%d goroutines after the call, %d before:\n%s", n, baseline, goroutines())
				}
				if n := eng.Stats().Abandoned; n != abandoned {
					t.Errorf("the server abandoned %s", tt.tool)
					abandoned = n
				}
			})
		}
	}
}

// BenchmarkBuiltinsCancelLatency measures, from the server's side, how long
// each built-in takes to return once its call's timeout has passed: the
// result's duration less the timeout, over 5 timed-out calls per case,
// reported as the largest in ms (the invariant's figure is 100 ms). Run it
// with -benchtime 1x; on a loaded machine the figures include its
// scheduling noise, which is why the test above does not time them.
func BenchmarkBuiltinsCancelLatency(b *testing.B) {
	eng, c := builtinsServer(b)
	warmUp(b, c)
	for b.Loop() {
		for _, tt := range cancelCases {
			if tt.outcome != stopped {
				continue
			}
			var worst time.Duration
			for range 5 {
				call := &toolwirev1.ToolCall{CallId: "c", Name: tt.tool, Arguments: tt.args, Timeout: durationpb.New(callTimeout)}
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				res, err := callOne(ctx, c, call)
				cancel()
				if err != nil || res.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT {
					b.Fatalf("%s: %v, %s %q; want TIMEOUT", tt.name, err, res.GetErrorKind(), client.Text(res))
				}
				worst = max(worst, res.GetDuration().AsDuration()-callTimeout)
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, strings.ReplaceAll(tt.name, " ", "_")+"-max-ms")
		}
	}
	if n := eng.Stats().Abandoned; n != 0 {
		b.Errorf("the server abandoned %d tools", n)
	}
}

// callTimeout ends each stopped call mid-work.
const callTimeout = 500 * time.Millisecond

type outcome int

const (
	stopped outcome = iota // TIMEOUT or CANCELLED
	result                 // the tool's own result, checked by want
	either                 // quick enough to finish or be stopped
)

// cancelCases are the inputs builtinsServer's tools get in the
// cancellation test: each keeps its tool busy, or once did.
var cancelCases = []struct {
	name, tool, args string
	outcome          outcome
	want             string // in the result's text, for result
}{
	{"find_files brace bomb", "find_files", `{"pattern":"` + strings.Repeat("{a,b}", 40) + `"}`, result, "more than 1024 alternatives"},
	{"find_files 20,000-level tree", "find_files", `{"pattern":"**/*.txt"}`, result, "[stopped early: depth limit"},
	{"find_files slow content search", "find_files", `{"pattern":"big/*.txt","content":"(?:\\w+\\s*){1,9}z"}`, stopped, ""},
	{"list_files wide folder", "list_files", `{"path":"wide"}`, either, ""},
	{"read_file named pipe", "read_file", `{"path":"pipe"}`, result, "not a regular file"},
	{"write_file symlink to a named pipe", "write_file", `{"path":"pipelink","content":"x"}`, result, "not a regular file"},
	{"edit_file symlink to a named pipe", "edit_file", `{"path":"pipelink","old_text":"a","new_text":"b"}`, result, "not a regular file"},
	{"run_command cwd a named pipe", "run_command", `{"argv":["true"],"cwd":"pipe"}`, result, "cwd pipe is not a folder"},
	{"run_command cwd a symlink to a named pipe", "run_command", `{"argv":["true"],"cwd":"pipelink"}`, result, "cwd pipelink is not a folder"},
	{"read_file 4 GiB line", "read_file", `{"path":"sparse.txt","offset":2}`, stopped, ""},
	{"write_file 20,000 levels", "write_file", `{"path":"` + strings.Repeat("n/", 20_000) + `f","content":"x"}`, result, "more than write_file's limit of 64"},
	{"edit_file 10 MiB", "edit_file", `{"path":"edit/huge.txt","old_text":"a","new_text":"b","replace_all":true}`, either, ""},
	{"run_command sleep", "run_command", `{"argv":["sleep","60"]}`, stopped, ""},
	{"run_command ignoring SIGTERM", "run_command", `{"argv":["sh","-c","trap '' TERM; sleep 60"]}`, stopped, ""},
	{"http no response", "http_silent", `{}`, stopped, ""},
	{"http slow body", "http_trickle", `{}`, stopped, ""},
	{"remote sleep", "r_sleep", `{"ms":60000}`, stopped, ""},
	{"diag sleep", "sleep", `{"ms":60000}`, stopped, ""},
	{"mcp stdio slow", "io_slow", `{}`, stopped, ""},
	{"mcp http sleep", "web_sleep", `{}`, stopped, ""},
}

// builtinsServer serves every built-in tool over a workspace holding
// cancelCases' inputs, and the forwarding ones over real servers, and
// returns the engine it runs on and a client of it. run_command's kill grace is 5 s,
// past the 2 s abandon grace, so that a cancelled run_command waiting for it
// would be abandoned, and short of waitGoroutines' 30 s.
func builtinsServer(tb testing.TB) (*engine.Engine, *client.Client) {
	e := wt.New(tb, nil)
	e.Deep(tb, 20_000, "deep.txt")
	big := strings.Repeat(strings.Repeat("ab ", 341)+"\n", 4<<10) // 4 MiB of 1 KiB lines
	e.Write(tb, "big/text.txt", big)
	hugeLines := 100_000 // 10 MiB
	if raceEnabled {
		hugeLines = 20_000 // 2 MiB: still 2 million matches, without the race detector's uncancellable checks of 10 MiB ranges
	}
	e.Write(tb, "edit/huge.txt", strings.Repeat(strings.Repeat("a", 99)+"\n", hugeLines))
	sparse(tb, filepath.Join(e.Dir, "sparse.txt"), 4<<30) // one 4 GiB line
	for i := range 5000 {
		e.Write(tb, fmt.Sprintf("wide/f%05d", i), "")
	}
	if err := syscall.Mkfifo(filepath.Join(e.Dir, "pipe"), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink("pipe", filepath.Join(e.Dir, "pipelink")); err != nil {
		tb.Fatal(err)
	}

	opts := workspacetools.Options{RunCommand: true, Command: runcommand.Options{KillGrace: 5 * time.Second}}
	reg, err := tools.NewRegistry(append(workspacetools.Tools(e.WS, opts), diag.Tools()...)...)
	if err != nil {
		tb.Fatal(err)
	}
	addHTTPTools(tb, reg)
	ls := loopback.Serve(tb, reg, grpcserve.Config{}) // the default abandon grace
	eng, c := ls.Engine, ls.Client
	mountRemote(tb, reg)
	mountMCP(tb, reg)
	for _, name := range []string{"r_sleep", "r_echo", "io_slow", "io_read", "web_sleep", "web_echo"} {
		waitForTool(tb, reg, name)
	}
	return eng, c
}

// warmUp makes one quick call through each of builtinsServer's connections.
func warmUp(tb testing.TB, c *client.Client) {
	warm, err := client.Collect(c.ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("echo", "echo", map[string]any{"text": "x"}),
		client.Call("remote", "r_echo", map[string]any{"text": "x"}),
		client.Call("stdio", "io_read", map[string]any{"text": "x"}),
		client.Call("http", "web_echo", map[string]any{}),
	}}))
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range warm.Results {
		if r.GetIsError() {
			tb.Fatalf("warming up %s: %s", r.GetCallId(), client.Text(r))
		}
	}
}

// callOne runs call alone and returns its result, if one came, and the
// stream's error.
func callOne(ctx context.Context, c *client.Client, call *toolwirev1.ToolCall) (*toolwirev1.CallResult, error) {
	var res *toolwirev1.CallResult
	for ev, err := range c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call}}) {
		if err != nil {
			return res, err
		}
		if r := ev.GetResult(); r != nil {
			res = r
		}
	}
	return res, nil
}

// addHTTPTools adds HTTP tools over a server that never answers
// (http_silent) and one that sends headers and a first chunk, then nothing
// more (http_trickle); its handlers return when the client goes away.
func addHTTPTools(t testing.TB, reg *tools.Registry) {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/trickle" {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "first chunk\n")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	t.Cleanup(hs.Close)
	hc := httpsource.NewClient()
	t.Cleanup(hc.CloseIdleConnections)
	ts, err := httpsource.Tools([]httpsource.Spec{
		{Name: "http_silent", Description: "Never answered.", URL: hs.URL + "/silent", ReadOnly: true},
		{Name: "http_trickle", Description: "Answered in part.", URL: hs.URL + "/trickle", ReadOnly: true},
	}, hc)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Add(ts...); err != nil {
		t.Fatal(err)
	}
}

// mountRemote serves the diagnostic tools from a second toolwire server
// (with the default abandon grace too) and mounts it as remote "r".
func mountRemote(t testing.TB, reg *tools.Registry) {
	t.Helper()
	rreg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	rsrv, err := grpcserve.New(reng, rreg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rsrv.Serve(ctx, lis) }()
	m := remote.New(reg, nil)
	t.Cleanup(func() {
		m.Close()
		cancel()
		<-served
		if n := reng.Stats().Abandoned; n != 0 {
			t.Errorf("the remote server abandoned %d tools", n)
		}
		reng.Close()
	})
	if err := m.Sync(context.Background(), []remote.Config{{Name: "r", Target: lis.Addr().String(), Insecure: true}}); err != nil {
		t.Fatal(err)
	}
}

// mountMCP connects the gateway to the MCP test server as a child process
// over stdio ("io") and to an MCP server over streamable HTTP whose sleep
// tool runs until cancelled ("web").
func mountMCP(t testing.TB, reg *tools.Registry) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "sleeper", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleeps until cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns at once."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo"}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	g := mcpsource.New(reg, nil)
	t.Cleanup(func() {
		g.Close()
		for ss := range s.Sessions() {
			ss.Close()
		}
		hs.Close()
	})
	err := g.Sync(context.Background(), []mcpsource.ServerConfig{
		{Name: "io", Command: mcpServerBin},
		{Name: "web", URL: hs.URL},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitForTool waits until reg holds name: mounts and gateways add their
// tools once connected.
func waitForTool(t testing.TB, reg *tools.Registry, name string) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := reg.Snapshot().Lookup(name); ok {
			return
		}
	}
	t.Fatalf("tool %s never appeared", name)
}

// settledGoroutines returns the goroutine count once it has stopped
// changing for a while.
func settledGoroutines() int {
	n := workGoroutines()
	for stable := 0; stable < 10; {
		time.Sleep(50 * time.Millisecond)
		if m := workGoroutines(); m == n {
			stable++
		} else {
			n, stable = m, 0
		}
	}
	return n
}

// waitGoroutines waits, boundedly, for the goroutine count to fall to n
// and returns the last count seen.
func waitGoroutines(n int) int {
	m := workGoroutines()
	for deadline := time.Now().Add(30 * time.Second); m > n && time.Now().Before(deadline); m = workGoroutines() {
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

// workGoroutines counts the goroutines but those of idle HTTP keep-alive
// connections. How many connections a client keeps in its pool is the
// transport's choice, not a leak: when a cancelled call's connection is
// closed and the gateway's ping and the SDK's notifications/cancelled go
// out at once, one of them dials a new connection, which then idles in
// the pool with its read and write loops (and, the MCP server being in
// this process, its server side waiting for a next request). A call
// still in flight keeps its caller's goroutine, which is counted.
func workGoroutines() int {
	n := 0
	for g := range strings.SplitSeq(goroutines(), "\n\n") {
		switch {
		case strings.Contains(g, "net/http.(*persistConn).readLoop"),
			strings.Contains(g, "net/http.(*persistConn).writeLoop"),
			strings.Contains(g, "net/http.(*conn).serve") && strings.Contains(g, "net/http.(*conn).readRequest"):
		default:
			n++
		}
	}
	return n
}

func goroutines() string {
	for buf := make([]byte, 1<<20); ; buf = make([]byte, 2*len(buf)) {
		if n := runtime.Stack(buf, true); n < len(buf) {
			return string(buf[:n])
		}
	}
}

// sparse makes a file of size bytes that begins with a line of text and
// holds no other line break: the rest is a hole, read as zero bytes
// without taking disk space.
func sparse(t testing.TB, name string, size int64) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.Repeat("text ", 2000)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}
