package mcpsource

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
	"github.com/toolwire/toolwire/tools"
	"golang.org/x/sys/unix"
)

// stoppableServer is a stdio test server whose process the test can stop
// (SIGSTOP: alive, answering nothing) and continue, with the liveness
// checks' stages on a channel.
type stoppableServer struct {
	t       *testing.T
	g       *Gateway
	reg     *tools.Registry
	pidfile string
	release string // the wait tool's release file
	stages  chan string
	// started, if set, runs in the check as it starts, before its ping.
	started func(r *rpc)
}

// newStoppableServer serves the test server as "x".
func newStoppableServer(t *testing.T, ping time.Duration) *stoppableServer {
	t.Helper()
	dir := t.TempDir()
	pidfile, release := filepath.Join(dir, "pid"), filepath.Join(dir, "release")
	s := serveStoppable(t, ServerConfig{Name: "x", Command: stdioServer, PingTimeout: ping,
		Env: map[string]string{"TESTSERVER_PIDFILE": pidfile, "TESTSERVER_RELEASEFILE": release}})
	s.pidfile, s.release = pidfile, release
	return s
}

// readyStoppable is newStoppableServer once it offers tool, with its
// tools and its process's ID.
func readyStoppable(t *testing.T, ping time.Duration, tool string) (*stoppableServer, *tools.Snapshot, int) {
	t.Helper()
	s := newStoppableServer(t, ping)
	snap := sourcetest.WaitTools(t, s.reg, "the stdio server's tools", sourcetest.Has(tool))
	return s, snap, readPID(t, s.pidfile)
}

// stop stops process pid (SIGSTOP) until the test ends.
func (s *stoppableServer) stop(pid int) {
	s.t.Helper()
	s.signal(pid, syscall.SIGSTOP)
	s.t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// serveStoppable serves cfg with the liveness checks' stages on s.stages.
func serveStoppable(t *testing.T, cfg ServerConfig) *stoppableServer {
	t.Helper()
	g, reg := newGateway(t)
	g.terminate = 100 * time.Millisecond
	s := &stoppableServer{t: t, g: g, reg: reg, stages: make(chan string, 16)}
	g.onCheck = func(stage string, r *rpc) {
		if stage == "started" && s.started != nil {
			s.started(r)
		}
		s.stages <- stage
	}
	if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	return s
}

// signal sends sig to the server's current process.
func (s *stoppableServer) signal(pid int, sig syscall.Signal) {
	s.t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		s.t.Fatal(err)
	}
	if sig == syscall.SIGSTOP {
		// The stop is asynchronous: each thread stops as it next handles
		// the signal. Wait until all have.
		for limit := time.Now().Add(waitLimit); !stopped(pid); time.Sleep(time.Millisecond) {
			if time.Now().After(limit) {
				s.t.Fatalf("pid %d did not stop", pid)
			}
		}
	}
}

// stopped reports whether every thread of process pid is stopped.
func stopped(pid int) bool {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state …
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// stage waits for the next stage of a liveness check.
func (s *stoppableServer) stage(want string) {
	s.t.Helper()
	select {
	case got := <-s.stages:
		if got != want {
			s.t.Fatalf("liveness check: %q; want %q", got, want)
		}
	case <-time.After(waitLimit):
		s.t.Fatalf("liveness check: no %q", want)
	}
}

// timeOut calls read with a context that ends before the stopped server
// can answer.
func (s *stoppableServer) timeOut(snap *tools.Snapshot) {
	s.t.Helper()
	s.timeOutCall(snap, "x_read", `{"text":"hi"}`)
}

// timeOutCall calls tool with a context that ends before the stopped
// server can answer.
func (s *stoppableServer) timeOutCall(snap *tools.Snapshot, tool, args string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := call(s.t, ctx, snap, tool, args, nil); !strings.Contains(text(r), "deadline exceeded") {
		s.t.Fatalf("a call to a stopped server: %q; want its deadline exceeded", text(r))
	}
}

// running starts a call of tool and returns its result's channel once
// the server has reported the call running.
func (s *stoppableServer) running(ctx context.Context, snap *tools.Snapshot, tool string) <-chan *tools.Result {
	s.t.Helper()
	return s.runningWith(ctx, snap, tool, `{}`)
}

// runningWith is running, with args.
func (s *stoppableServer) runningWith(ctx context.Context, snap *tools.Snapshot, tool, args string) <-chan *tools.Result {
	s.t.Helper()
	rec := newRecorder()
	done := make(chan *tools.Result, 1)
	go func() { done <- call(s.t, ctx, snap, tool, args, rec) }()
	select {
	case <-rec.ch:
	case <-time.After(waitLimit):
		s.t.Fatalf("the %s call did not start", tool)
	}
	return done
}

// kept checks that the server of process pid still serves calls, not
// restarted.
func (s *stoppableServer) kept(snap *tools.Snapshot, pid int) {
	s.t.Helper()
	if r := call(s.t, context.Background(), snap, "x_read", `{"text":"still"}`, nil); r.IsError || !strings.Contains(text(r), "still") {
		s.t.Errorf("after the check: %q", text(r))
	}
	if readPID(s.t, s.pidfile) != pid {
		s.t.Error("the server was restarted")
	}
}

// TestStdioStoppedAnswering: a stdio server that is alive but answers
// nothing (stopped with SIGSTOP, as a wedged Go runtime or a deadlock
// leaves one) is found out once a call has ended without its answer: it
// answers no ping for ping_timeout, so its session is given up, a call
// begun after the ping fails at once naming why, and its process is
// stopped and started again, its tools back.
func TestStdioStoppedAnswering(t *testing.T) {
	t.Parallel()
	s, snap, pid := readyStoppable(t, 300*time.Millisecond, "x_read")
	s.stop(pid)

	// A call begun as the check starts is not waited for: the session's
	// end fails it, with the cause.
	late := make(chan *tools.Result, 1)
	s.started = func(r *rpc) {
		go func() { late <- call(t, context.Background(), snap, "x_read", `{"text":"late"}`, nil) }()
		waitCalls(r)
	}
	s.timeOut(snap)
	s.stage("started")
	s.stage("given up")
	select {
	case r := <-late:
		if !r.IsError || !strings.Contains(text(r), "answered no ping for 300ms") {
			t.Errorf("a call in flight as the server was given up: %q; want an error naming the unanswered ping", text(r))
		}
	case <-time.After(waitLimit):
		t.Fatal("a call in flight hangs after the server was given up")
	}
	waitDead(t, pid, "the stopped server")
	snap = sourcetest.WaitTools(t, s.reg, "the tools to come back", func(names []string) bool {
		return sourcetest.Has("x_read")(names) && readPID(t, s.pidfile) != pid
	})
	if r := call(t, context.Background(), snap, "x_read", `{"text":"again"}`, nil); r.IsError || !strings.Contains(text(r), "again") {
		t.Errorf("after the restart: %q", text(r))
	}
	// The server's status (toolwire status, the console) says why its
	// last session ended.
	if st := s.g.Status(); len(st) != 1 || !strings.Contains(st[0].Err, "answered no ping for 300ms") {
		t.Errorf("status after the restart: %+v; want the cause", st)
	}
}

// TestStdioBusyServerKept: a server that answers nothing while a call is
// in flight within its deadline (one that works a request at a time, busy
// with it: stopped here) is waited for past ping_timeout, until that call
// ends or passes its deadline; once it goes on, it answers, and it is
// kept, that call's result and all.
func TestStdioBusyServerKept(t *testing.T) {
	t.Parallel()
	s, snap, pid := readyStoppable(t, 100*time.Millisecond, "x_wait")

	busy := s.running(context.Background(), snap, "x_wait")
	s.signal(pid, syscall.SIGSTOP)
	s.timeOut(snap)
	s.stage("started")
	s.stage("waiting") // for the wait call, in flight within its deadline
	// Longer than ping_timeout: a check that did not wait would give the
	// server up meanwhile (and the stage would be "given up").
	time.Sleep(300 * time.Millisecond)
	s.signal(pid, syscall.SIGCONT)
	if err := os.WriteFile(s.release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.stage("kept")
	select {
	case r := <-busy:
		if r.IsError || text(r) != "released" {
			t.Errorf("the call in flight: %q; want its result", text(r))
		}
	case <-time.After(waitLimit):
		t.Fatal("the call in flight did not end")
	}
	s.kept(snap, pid)
}

// TestStdioCancelledCallKept: a call cancelled on a live server has it
// pinged, and it answers: kept, with no restart.
func TestStdioCancelledCallKept(t *testing.T) {
	t.Parallel()
	s, snap, pid := readyStoppable(t, time.Minute, "x_slow")
	ctx, cancel := context.WithCancel(context.Background())
	done := s.running(ctx, snap, "x_slow")
	cancel()
	s.stage("started")
	s.stage("kept")
	<-done
	s.kept(snap, pid)
}

// TestStdioCheckAtClose: closing the gateway while a check waits for a
// stopped server's answer ends the check, the ping and the process, and
// leaves no goroutine (TestMain's goleak).
func TestStdioCheckAtClose(t *testing.T) {
	t.Parallel()
	s, snap, pid := readyStoppable(t, time.Minute, "x_read")
	s.stop(pid)
	s.timeOut(snap)
	s.stage("started")
	closed := make(chan struct{})
	go func() {
		s.g.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(waitLimit):
		t.Fatal("Close hangs on a check of a stopped server")
	}
	waitDead(t, pid, "the stopped server")
}

// TestStdioStoppedReading: a call whose request fills the pipe to a
// server that reads nothing ends at its deadline all the same (a pipe
// write is given one), as does a call queued behind it; the message cut
// short (the server read none of it for ping_timeout after the deadline)
// ends the session, and the server is restarted, its status saying why.
func TestStdioStoppedReading(t *testing.T) {
	t.Parallel()
	s, snap, pid := readyStoppable(t, 300*time.Millisecond, "x_read")
	s.stop(pid)

	bigCtx, cancelBig := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelBig()
	ended := make(chan string, 2)
	go func() { ended <- "big: " + text(call(t, bigCtx, snap, "x_read", bigText, nil)) }()
	// The small call is sent once the big one is stuck writing (the
	// server's stdin is full); it waits behind it, until its own
	// deadline. (Sent before, it would be written first, and its end
	// would wait for its notifications/cancelled, written behind the big
	// one.)
	for limit := time.Now().Add(waitLimit); pipeHolds(pid) < 64<<10; time.Sleep(time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the big call's request does not fill the server's stdin")
		}
	}
	smallCtx, cancelSmall := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelSmall()
	go func() { ended <- "small: " + text(call(t, smallCtx, snap, "x_read", `{"text":"hi"}`, nil)) }()
	for _, want := range []string{"small: ", "big: "} {
		select {
		case got := <-ended:
			if !strings.HasPrefix(got, want) || !strings.Contains(got, "deadline exceeded") {
				t.Errorf("%q; want the %s call to end by its deadline", got, strings.TrimSuffix(want, ": "))
			}
		case <-time.After(waitLimit):
			t.Fatalf("the %s call to a server that reads nothing still hangs", strings.TrimSuffix(want, ": "))
		}
	}
	waitDead(t, pid, "the server that read nothing")
	sourcetest.WaitTools(t, s.reg, "the tools to come back", func(names []string) bool {
		return sourcetest.Has("x_read")(names) && readPID(t, s.pidfile) != pid
	})
	// Cut short, or not answering the check's ping, whichever came first:
	// both take ping_timeout.
	if st := s.g.Status(); len(st) != 1 || !strings.Contains(st[0].Err, "cut short") && !strings.Contains(st[0].Err, "answered no ping") {
		t.Errorf("status after the restart: %+v; want the cause", st)
	}
}

// pipeHolds returns how many bytes wait unread in process pid's stdin
// (a pipe), or -1.
func pipeHolds(pid int) int {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/fd/0", os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return -1
	}
	defer f.Close()
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ) // FIONREAD
	if err != nil {
		return -1
	}
	return n
}

// bigText is read's arguments past a pipe's 64 KiB.
var bigText = `{"text":"` + strings.Repeat("x", 1<<20) + `"}`

// TestStdioSlowReaderKept: a server that goes on reading within
// ping_timeout of a call's deadline gets the rest of the call's message:
// its session is kept, and so is the server.
func TestStdioSlowReaderKept(t *testing.T) {
	t.Parallel()
	s, snap, pid := readyStoppable(t, time.Minute, "x_read")
	s.signal(pid, syscall.SIGSTOP)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan *tools.Result, 1)
	go func() { done <- call(t, ctx, snap, "x_read", bigText, nil) }()
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond) // the message is cut unless the server reads on
	s.signal(pid, syscall.SIGCONT)
	select {
	case r := <-done:
		if !strings.Contains(text(r), "deadline exceeded") {
			t.Errorf("the call: %q; want its deadline exceeded", text(r))
		}
	case <-time.After(waitLimit):
		t.Fatal("the call hangs")
	}
	s.kept(snap, pid)
	if st := s.g.Status(); len(st) != 1 || st[0].Err != "" {
		t.Errorf("status: %+v; want no error", st)
	}
}

// TestHTTPServerStoppedAnswering: a streamable HTTP server that takes
// calls and pings and answers neither is given up the same way, after
// reconnect_timeout: a call begun after the ping fails naming why, its
// tools go, and the session is made again once the server answers.
func TestHTTPServerStoppedAnswering(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(t, testserver.Hooks{})
	var silent atomic.Bool
	srv.silence(func(r *http.Request) bool {
		if !silent.Load() || r.Method != http.MethodPost {
			return false
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		return bytes.Contains(body, []byte(`"tools/call"`)) || bytes.Contains(body, []byte(`"ping"`))
	})
	g, reg := newGateway(t)
	stages := make(chan string, 16)
	late := make(chan *tools.Result, 1)
	var snap *tools.Snapshot
	g.onCheck = func(stage string, r *rpc) {
		if stage == "started" {
			go func() { late <- call(t, context.Background(), snap, "h_read", `{"text":"late"}`, nil) }()
			waitCalls(r)
		}
		stages <- stage
	}
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "h", URL: srv.URL, ReconnectTimeout: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	snap = sourcetest.WaitTools(t, reg, "the server's tools", sourcetest.Has("h_read"))
	initialize := func(r request) bool { return r.rpc == "initialize" }
	sessions := len(srv.requestsMatching(initialize))
	silent.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := call(t, ctx, snap, "h_read", `{"text":"hi"}`, nil); !strings.Contains(text(r), "deadline exceeded") {
		t.Fatalf("a call to a silent server: %q; want its deadline exceeded", text(r))
	}
	for _, want := range []string{"started", "given up"} {
		select {
		case got := <-stages:
			if got != want {
				t.Fatalf("liveness check: %q; want %q", got, want)
			}
		case <-time.After(waitLimit):
			t.Fatalf("liveness check: no %q", want)
		}
	}
	select {
	case r := <-late:
		if !r.IsError || !strings.Contains(text(r), "answered no ping for 200ms") {
			t.Errorf("a call in flight as the session was given up: %q; want an error naming the unanswered ping", text(r))
		}
	case <-time.After(waitLimit):
		t.Fatal("a call in flight hangs after the session was given up")
	}
	silent.Store(false)
	// A new session has listed its tools: the old one's went first.
	snap = sourcetest.WaitTools(t, reg, "the tools to come back", func(names []string) bool {
		return len(srv.requestsMatching(initialize)) > sessions && sourcetest.Has("h_read")(names)
	})
	if r := call(t, context.Background(), snap, "h_read", `{"text":"again"}`, nil); r.IsError || !strings.Contains(text(r), "again") {
		t.Errorf("after the session was made again: %q", text(r))
	}
}

// waitCalls waits, at most waitLimit, until r has a call in flight.
func waitCalls(r *rpc) {
	for limit := time.Now().Add(waitLimit); time.Now().Before(limit); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		n := len(r.calls)
		r.mu.Unlock()
		if n > 0 {
			return
		}
	}
}

// TestEverythingStoppedAnswering: the checks with a real third-party
// stdio server, server-everything (Node): a call cancelled on it has it
// pinged, and it answers, so it is kept; stopped (SIGSTOP), a call that
// times out has it given up, and a new process serves its tools.
func TestEverythingStoppedAnswering(t *testing.T) {
	t.Parallel()
	mark := t.Name() // finds its process among the tests' others: unique, where TempDir's base is each test's "001"
	s := serveStoppable(t, ServerConfig{Name: "ev", Command: everything(t), Args: []string{"stdio"},
		PingTimeout: 300 * time.Millisecond, Env: map[string]string{"TOOLWIRE_TEST_MARK": mark}})
	snap := sourcetest.WaitTools(t, s.reg, "server-everything's tools", sourcetest.Has("ev_echo", "ev_trigger-long-running-operation"))
	pid := markedProcess(t, mark, 0)

	ctx, cancel := context.WithCancel(context.Background())
	done := s.runningWith(ctx, snap, "ev_trigger-long-running-operation", `{"duration":60,"steps":60}`)
	cancel()
	s.stage("started")
	s.stage("kept")
	<-done
	if r := call(t, context.Background(), snap, "ev_echo", `{"message":"kept"}`, nil); r.IsError || !strings.Contains(text(r), "kept") {
		t.Errorf("after the check: %q", text(r))
	}

	s.stop(pid)
	s.timeOutCall(snap, "ev_echo", `{"message":"hi"}`)
	s.stage("started")
	s.stage("given up")
	waitDead(t, pid, "the stopped server")
	snap = sourcetest.WaitTools(t, s.reg, "the tools to come back", func(names []string) bool {
		return sourcetest.Has("ev_echo")(names) && markedProcess(t, mark, pid) != 0
	})
	if r := call(t, context.Background(), snap, "ev_echo", `{"message":"again"}`, nil); r.IsError || !strings.Contains(text(r), "again") {
		t.Errorf("after the restart: %q", text(r))
	}
}

// markedProcess returns the ID of a running process other than not whose
// environment has TOOLWIRE_TEST_MARK=mark. With not 0 it waits for one (at
// most waitLimit); else it looks once, and returns 0 when there is none.
func markedProcess(t *testing.T, mark string, not int) int {
	t.Helper()
	want := []byte("TOOLWIRE_TEST_MARK=" + mark + "\x00")
	for limit := time.Now().Add(waitLimit); ; time.Sleep(10 * time.Millisecond) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == not || !alive(pid) {
				continue
			}
			if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(env, want) {
				return pid
			}
		}
		if not != 0 {
			return 0
		}
		if time.Now().After(limit) {
			t.Fatalf("no process marked %s", mark)
		}
	}
}
