package mcpsource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
	"github.com/toolwire/toolwire/tools"
)

// TestProgressBeforeResult: every progress report the server writes before
// its result reaches the call before the call returns, in order, none lost.
// The test server sends its reports and its result back to back.
func TestProgressBeforeResult(t *testing.T) {
	const runs, steps = 500, 4
	for _, tc := range []struct {
		name string
		cfg  func(t *testing.T) ServerConfig
	}{
		{"stdio", func(*testing.T) ServerConfig { return ServerConfig{Name: "p", Command: stdioServer} }},
		{"http", func(t *testing.T) ServerConfig {
			return ServerConfig{Name: "p", URL: newHTTPServer(t, testserver.Hooks{}).URL}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, reg := newGateway(t)
			if err := g.Sync(context.Background(), []ServerConfig{tc.cfg(t)}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the progress tool", sourcetest.Has("p_progress"))
			want := []float64{1, 2, 3, 4}
			lost, bad := 0, 0
			for range runs {
				rec := newRecorder()
				r := call(t, context.Background(), snap, "p_progress", fmt.Sprintf(`{"steps":%d}`, steps), rec)
				if r.IsError {
					t.Fatalf("progress call: %q", text(r))
				}
				var got []float64
				for _, p := range rec.got { // the call has returned: no report comes later
					got = append(got, *p.Progress)
				}
				lost += max(0, steps-len(got))
				if !slices.Equal(got, want) {
					bad++
					if bad <= 3 {
						t.Errorf("progress %v, want %v", got, want)
					}
				}
			}
			t.Logf("%d of %d runs with progress lost or out of order; %d reports lost", bad, runs, lost)
			if bad > 0 {
				t.Errorf("%d of %d runs with progress lost or out of order; %d reports lost", bad, runs, lost)
			}
		})
	}
}

// TestHTTPServerKilledMidCall: a streamable HTTP server process killed while
// a call runs fails the call at once and its tools go (a new revision),
// instead of the SDK retrying its streams for about 19 s.
func TestHTTPServerKilledMidCall(t *testing.T) {
	t.Parallel()
	urlfile := filepath.Join(t.TempDir(), "url")
	cmd := exec.Command(stdioServer)
	cmd.Env = append(os.Environ(), "TESTSERVER_URLFILE="+urlfile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := waitFile(t, urlfile)
	killedMidCall(t, ServerConfig{Name: "k", URL: url}, "k_slow", `{}`, cmd.Process)
}

// TestEverythingKilledMidCall is TestHTTPServerKilledMidCall with a real
// third-party server, whose streams are resumable (it keeps an event
// store), so the SDK tries to resume the call's stream: the gateway's ping
// after the stream broke finds the server gone first.
func TestEverythingKilledMidCall(t *testing.T) {
	t.Parallel()
	url, proc := everythingHTTP(t)
	killedMidCall(t, ServerConfig{Name: "ev", URL: url}, "ev_trigger-long-running-operation", `{"duration":60,"steps":60}`, proc)
}

// everythingHTTP starts server-everything over streamable HTTP on a free
// loopback port, stopped when the test ends, and returns its URL.
func everythingHTTP(t *testing.T) (string, *os.Process) {
	t.Helper()
	bin := everything(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cmd := exec.Command(bin, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", lis.Addr().(*net.TCPAddr).Port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for limit := time.Now().Add(waitLimit); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return "http://" + addr + "/mcp", cmd.Process
		}
		if time.Now().After(limit) {
			t.Fatalf("server-everything does not listen on %s: %v", addr, err)
		}
	}
}

// killedMidCall connects to cfg, starts a call of tool, waits for its first
// progress report, kills proc, and checks that the call returns an error
// result and the server's tools go.
func killedMidCall(t *testing.T, cfg ServerConfig, tool, args string, proc *os.Process) {
	t.Helper()
	g, reg := newGateway(t)
	g.set.MinBackoff, g.set.MaxBackoff = time.Minute, time.Minute // gone means gone for this test
	if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the server's tools", sourcetest.Has(tool))
	rec := newRecorder()
	done := make(chan *tools.Result)
	go func() { done <- call(t, context.Background(), snap, tool, args, rec) }()
	select {
	case <-rec.ch: // the call is running on the server
	case <-time.After(waitLimit):
		t.Fatal("the call did not start")
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var r *tools.Result
	select {
	case r = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the call in flight hangs after the server was killed")
	}
	errAfter := time.Since(killed)
	if errAfter > farBelowSDK {
		t.Errorf("the call's error result came %v after the kill", errAfter)
	}
	// It says plainly which server went away, and keeps the SDK's cause
	// short, at the end (once it began "failed the call: calling
	// "tools/call": sending "tools/call": failed to reconnect (session ID:
	// …): connection aborted after 0 attempts").
	want := fmt.Sprintf("MCP server %q went away during the call: no answer came, so the call may or may not have run (", cfg.Name)
	if got := text(r); !r.IsError || !strings.HasPrefix(got, want) || strings.Contains(got, "session ID") || strings.Contains(got, "tools/call") {
		t.Errorf("call in flight: %q; want an error result beginning %q, without the SDK's request and session ID", got, want)
	}
	after := sourcetest.WaitTools(t, reg, "the tools to go", none(cfg.Name+"_"))
	t.Logf("error result %v after the kill, tools gone %v after it: %q", errAfter, time.Since(killed), text(r))
	if after.Revision() == snap.Revision() {
		t.Error("revision unchanged")
	}
}

// waitFile returns the contents of file once it exists.
func waitFile(t *testing.T, file string) string {
	t.Helper()
	for limit := time.Now().Add(waitLimit); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil {
			return string(b)
		}
		if time.Now().After(limit) {
			t.Fatalf("%s was not written", file)
		}
	}
}

// everything returns the path of @modelcontextprotocol/server-everything,
// installed by `npm ci` in testdata/everything (.ci/run does it).
func everything(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(tb, "node (for @modelcontextprotocol/server-everything)")
	}
	bin, err := filepath.Abs("testdata/everything/node_modules/.bin/mcp-server-everything")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(tb, "@modelcontextprotocol/server-everything (npm ci in sources/mcpsource/testdata/everything)")
	}
	return bin
}

// TestRemovedWhileCalling: a server removed by Sync while a call runs on it
// offers no tools from then on, but the call finishes on the old session,
// its progress and result delivered, before the session closes.
func TestRemovedWhileCalling(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	srv := newHTTPServer(t, testserver.Hooks{Wait: func(ctx context.Context) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}})
	g, reg := newGateway(t)
	t.Cleanup(free) // before the gateway's Close, which waits for the call
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "r", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("r_wait"))
	rec := newRecorder()
	done := make(chan *tools.Result, 1)
	go func() { done <- call(t, context.Background(), snap, "r_wait", `{}`, rec) }()
	select {
	case <-rec.ch: // "waiting": the call runs on the server
	case <-time.After(waitLimit):
		t.Fatal("the call did not start")
	}
	if err := g.Sync(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the removed server's tools to go", none("r_"))
	if n := sessions(srv); n != 1 {
		t.Fatalf("%d sessions on the server while the call runs, want 1 (the old one); requests: %v", n, srv.requestsMatching(func(request) bool { return true }))
	}
	free()
	r := <-done
	if r.IsError || text(r) != "released" {
		t.Errorf("call on the removed server: %q (error %v), want \"released\"", text(r), r.IsError)
	}
	var msgs []string
	for _, p := range rec.got {
		msgs = append(msgs, p.Message)
	}
	if !slices.Equal(msgs, []string{"waiting", "released"}) {
		t.Errorf("progress %q, want [waiting released]", msgs)
	}
	for limit := time.Now().Add(waitLimit); sessions(srv) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the old session was not closed after its call finished")
		}
	}
}

// TestCancelledOnARemovedServer: a call whose server a Sync removed runs
// on on the old session (TestRemovedWhileCalling), and when its caller then
// cancels it, the server is told and its handler stops, over streamable
// HTTP and stdio, each protocol path. The old session used to be closing
// already, with nothing of the gateway's to wait for but stdio's own
// JSON-RPC calls: the SDK, waiting for its calls before it closed, refused
// to send anything meanwhile, notifications/cancelled included, so the
// server's handler ran on (a real server's for as long as its work took;
// measured against a real serve, one per reload that cut a call), and the
// gateway's call waited up to 5 s for the session's DELETE, which the
// server held while that handler ran, ignoring its cancellation. Waiting
// for the SDK's calls too was not enough: the SDK sends the notice on a
// goroutine of its own after the call has returned, and lost the race
// with the session's close (1 run in 40 here); the gateway sends it too.
// That was on a session whose close had begun when the call returned; a
// close begun just after, before the SDK's goroutine wrote its notice,
// still lost it (a fresh-clone CI at load 11, and within the first few
// of 200 runs here beside three CPU spinners): the call now ends only
// once the SDK's notice is written (0 in 150 such runs).
func TestCancelledOnARemovedServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cfg returns the server's configuration and what tells that its
		// slow tool's handler saw its cancellation.
		cfg func(t *testing.T) (ServerConfig, func() bool)
	}{
		{"http", func(t *testing.T) (ServerConfig, func() bool) {
			cancelled := make(chan struct{})
			srv := newHTTPServer(t, testserver.Hooks{SlowCancelled: func() { close(cancelled) }})
			return ServerConfig{Name: "r", URL: srv.URL}, func() bool {
				select {
				case <-cancelled:
					return true
				default:
					return false
				}
			}
		}},
		{"stdio", func(t *testing.T) (ServerConfig, func() bool) { return stdioCancelConfig(t, "") }},
		{"stdio 2025-11-25", func(t *testing.T) (ServerConfig, func() bool) { return stdioCancelConfig(t, "2025-11-25") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, cancelled := tc.cfg(t)
			g, reg := newGateway(t)
			if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("r_slow"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := newRecorder()
			done := make(chan *tools.Result)
			go func() { done <- call(t, ctx, snap, "r_slow", `{}`, rec) }()
			select {
			case <-rec.ch: // "started": the call runs on the server
			case <-time.After(waitLimit):
				t.Fatal("the call did not start")
			}
			if err := g.Sync(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			sourcetest.WaitTools(t, reg, "the removed server's tools to go", none("r_"))
			cancel()
			if r := <-done; !r.IsError {
				t.Errorf("cancelled call: %+v", r)
			}
			for limit := time.Now().Add(waitLimit); !cancelled(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(limit) {
					t.Fatal("the removed server's handler did not see the call's cancellation")
				}
			}
		})
	}
}

// stdioCancelConfig is a stdio test server named r, speaking protocol (its
// default when empty), whose slow tool's handler writes a file when it sees
// its cancellation; the function reports whether it has.
func stdioCancelConfig(t *testing.T, protocol string) (ServerConfig, func() bool) {
	cancelfile := filepath.Join(t.TempDir(), "cancelled")
	env := map[string]string{"TESTSERVER_CANCELFILE": cancelfile}
	if protocol != "" {
		env["TESTSERVER_PROTOCOL"] = protocol
	}
	return ServerConfig{Name: "r", Command: stdioServer, Env: env}, func() bool {
		b, _ := os.ReadFile(cancelfile)
		return string(b) == "cancelled"
	}
}

// TestStdioStoppedWhileCalling: a stdio server that a Sync stops (its
// configuration changed) while a call runs on it finishes that call on its
// old process, progress and result, and only then is that process ended.
// The server speaks 2025-11-25, as server-everything does, so the call
// goes on the gateway's own JSON-RPC (callDirect). The old connection's
// reader used to look for its responses among the requests of the
// server's current session, which had none by then: the response was
// dropped, the call waited for its deadline, and the old process lived as
// long, one more child per reload.
func TestStdioStoppedWhileCalling(t *testing.T) {
	g, reg := newGateway(t)
	dir := t.TempDir()
	pidfile, release := filepath.Join(dir, "pid"), filepath.Join(dir, "release")
	cfg := ServerConfig{Name: "io", Command: stdioServer, Env: map[string]string{
		"TESTSERVER_PIDFILE": pidfile, "TESTSERVER_RELEASEFILE": release, "TESTSERVER_PROTOCOL": "2025-11-25"}}
	if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the tools", sourcetest.Has("io_wait"))
	oldPID := readPID(t, pidfile)
	rec := newRecorder()
	done := make(chan *tools.Result)
	// The guard only keeps the broken behaviour from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	go func() { done <- call(t, ctx, snap, "io_wait", `{}`, rec) }()
	select {
	case <-rec.ch: // "waiting": the call runs on the server
	case <-time.After(waitLimit):
		t.Fatal("the call did not start")
	}
	// Another environment is another configuration: the server restarts.
	cfg.Env = map[string]string{"TESTSERVER_PIDFILE": pidfile + "2"}
	if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the new session's tools", func(names []string) bool {
		return sourcetest.Has("io_wait")(names) && readPIDIfAny(pidfile+"2") != 0
	})
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.IsError || text(r) != "released" {
		t.Errorf("call on the stopped server: %q (error %v), want \"released\"", text(r), r.IsError)
	}
	var msgs []string
	for _, p := range rec.got {
		msgs = append(msgs, p.Message)
	}
	if !slices.Equal(msgs, []string{"waiting", "released"}) {
		t.Errorf("progress %q, want [waiting released]", msgs)
	}
	for limit := time.Now().Add(waitLimit); !errors.Is(syscall.Kill(oldPID, 0), syscall.ESRCH); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("the old server process %d was not ended after its call finished", oldPID)
		}
	}
}

// readPIDIfAny is the process ID in file, 0 while there is none.
func readPIDIfAny(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(string(b))
	return pid
}

func sessions(srv *httpServer) int {
	n := 0
	for range srv.mcp.Sessions() {
		n++
	}
	return n
}

// TestTasks calls server-everything's simulate-research-query, which
// declares execution.taskSupport "required", over stdio and streamable HTTP:
// the call is made task-augmented, the task's status messages arrive as
// progress, and the result is the task's. A cancelled call cancels its
// task (tasks/cancel).
func TestTasks(t *testing.T) {
	t.Parallel()
	bin := everything(t)
	for _, tc := range []struct {
		name string
		cfg  func(t *testing.T) ServerConfig
	}{
		{"stdio", func(*testing.T) ServerConfig { return ServerConfig{Name: "ev", Command: bin, Args: []string{"stdio"}} }},
		{"http", func(t *testing.T) ServerConfig {
			url, _ := everythingHTTP(t)
			return ServerConfig{Name: "ev", URL: url}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, reg := newGateway(t)
			tasks := make(chan func(context.Context) (task, error), 2)
			g.onTask = func(r *rpc, id string) {
				tasks <- func(ctx context.Context) (task, error) {
					var st task
					err := r.call(ctx, "tasks/get", map[string]string{"taskId": id}, &st)
					return st, err
				}
			}
			if err := g.Sync(context.Background(), []ServerConfig{tc.cfg(t)}); err != nil {
				t.Fatal(err)
			}
			const tool = "ev_simulate-research-query"
			snap := sourcetest.WaitTools(t, reg, "the task tool", sourcetest.Has(tool))

			rec := newRecorder()
			r := call(t, context.Background(), snap, tool, `{"topic":"gophers"}`, rec)
			if r.IsError || !strings.Contains(text(r), "Research Report: gophers") {
				t.Errorf("task result: %q", text(r))
			}
			var msgs []string
			for _, p := range rec.got {
				msgs = append(msgs, p.Message)
			}
			// The server moves through four stages, a second each; polling
			// once a second sees most of them, in order.
			if len(msgs) < 2 || msgs[0] != "Gathering sources..." || !slices.IsSorted(stageIndexes(t, msgs)) {
				t.Errorf("progress %q: want the stages' status messages, in order, from the first", msgs)
			}
			<-tasks

			ctx, cancel := context.WithCancel(context.Background())
			rec = newRecorder()
			done := make(chan *tools.Result)
			go func() { done <- call(t, ctx, snap, tool, `{"topic":"cancelled"}`, rec) }()
			var get func(context.Context) (task, error)
			select {
			case get = <-tasks:
			case <-time.After(waitLimit):
				t.Fatal("no task was created")
			}
			cancel()
			if r := <-done; !r.IsError || !strings.Contains(text(r), "context canceled") {
				t.Errorf("cancelled call: %q", text(r))
			}
			for limit := time.Now().Add(waitLimit); ; time.Sleep(20 * time.Millisecond) {
				st, err := get(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if st.Status == "cancelled" {
					break
				}
				if time.Now().After(limit) {
					t.Fatalf("task after the call was cancelled: %+v, want status cancelled", st)
				}
			}
		})
	}
}

// stageIndexes maps server-everything's research status messages to their
// stage's index.
func stageIndexes(t *testing.T, msgs []string) []int {
	stages := []string{"Gathering sources...", "Analyzing content...", "Synthesizing findings...", "Generating report..."}
	var out []int
	for _, m := range msgs {
		i := slices.Index(stages, m)
		if i < 0 {
			t.Errorf("unexpected status message %q", m)
		}
		out = append(out, i)
	}
	return out
}
