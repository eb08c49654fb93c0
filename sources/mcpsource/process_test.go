package mcpsource

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// helperServer is a stdio test server that starts a helper holding its
// stdout and stderr, in its process group or (setsid) in a session of its
// own, and offers the exit tool. It returns the config and a function
// that returns the helper's process ID once it has one; the helper is
// killed when the test ends.
func helperServer(t *testing.T, name string, setsid bool) (ServerConfig, func() int) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "helper")
	env := map[string]string{"TESTSERVER_HELPER_PIDFILE": pidfile, "TESTSERVER_EXIT_TOOL": "1"}
	if setsid {
		env["TESTSERVER_HELPER_SETSID"] = "1"
	}
	pid := func() int { return readPID(t, pidfile) }
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidfile); err == nil {
			if p, err := strconv.Atoi(string(b)); err == nil {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	return ServerConfig{Name: name, Command: stdioServer, Env: env}, pid
}

// alive reports whether process pid runs: it exists and is not a zombie
// (one its new parent has yet to reap).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// pid (comm) state …
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// waitDead waits, at most waitLimit, until process pid no longer runs.
func waitDead(t *testing.T, pid int, what string) {
	t.Helper()
	for limit := time.Now().Add(waitLimit); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("%s (pid %d) is still running", what, pid)
		}
	}
}

// TestStdioHelperAtClose: closing the gateway ends a stdio server whose
// helper holds its stdout and stderr without leaving a goroutine behind,
// and ends the helper when it is in the server's process group.
func TestStdioHelperAtClose(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setsid bool
	}{
		{"in its group", false},
		{"in a session of its own", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			g, reg := newGateway(t)
			cfg, helper := helperServer(t, "h", tc.setsid)
			if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
				t.Fatal(err)
			}
			sourcetest.WaitTools(t, reg, "the server's tools", sourcetest.Has("h_exit"))
			pid := helper()
			start := time.Now()
			g.Close()
			// The server exits when its stdin closes; its helper's hold on
			// stderr keeps Wait no longer than exitGrace.
			if d := time.Since(start); d > g.terminate {
				t.Errorf("Close took %v", d)
			}
			if tc.setsid {
				if !alive(pid) {
					t.Errorf("the helper in a session of its own (pid %d) is gone; it was expected out of reach", pid)
				}
			} else {
				waitDead(t, pid, "the helper in the server's group")
			}
			if err := goleak.Find(ignore); err != nil {
				t.Errorf("after Close: %v", err)
			}
		})
	}
}

// TestStdioExitMidCall: a stdio server that exits during a call fails the
// call at once and its tools go, whether or not a helper it started holds
// its stdout and stderr; a helper in its group goes with it.
func TestStdioExitMidCall(t *testing.T) {
	for _, tc := range []struct {
		name           string
		helper, setsid bool
	}{
		{"alone", false, false},
		{"helper in its group", true, false},
		{"helper in a session of its own", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, reg := newGateway(t)
			g.set.MinBackoff, g.set.MaxBackoff = time.Minute, time.Minute // exited means gone for this test
			cfg := ServerConfig{Name: "x", Command: stdioServer, Env: map[string]string{"TESTSERVER_EXIT_TOOL": "1"}}
			var helper func() int
			if tc.helper {
				cfg, helper = helperServer(t, "x", tc.setsid)
			}
			if err := g.Sync(context.Background(), []ServerConfig{cfg}); err != nil {
				t.Fatal(err)
			}
			snap := sourcetest.WaitTools(t, reg, "the server's tools", sourcetest.Has("x_exit"))
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			start := time.Now()
			r := call(t, ctx, snap, "x_exit", `{}`, nil)
			took := time.Since(start)
			if ctx.Err() != nil {
				t.Fatalf("the call waited for its deadline (%v): %q", took, text(r))
			}
			if !r.IsError || !strings.Contains(text(r), `MCP server "x"`) {
				t.Errorf("call: %q; want an error result naming the server", text(r))
			}
			// exitGrace at most, on a loaded machine; not the call's deadline.
			if took > farBelowSDK {
				t.Errorf("the error result came %v after the call started", took)
			}
			sourcetest.WaitTools(t, reg, "the tools to go", none("x_"))
			if tc.helper && !tc.setsid {
				waitDead(t, helper(), "the helper in the server's group")
			}
			t.Logf("error result after %v: %q", took, text(r))
		})
	}
}

func TestStdioKeepsSysProcAttr(t *testing.T) {
	t.Parallel()
	// A caller's session of its own (as a sandbox's start might ask) is
	// kept, and the group it leads is still the server's.
	cmd := stdioCommand(t)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p, err := startProcess(cmd, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if !cmd.SysProcAttr.Setsid || cmd.SysProcAttr.Setpgid || !p.ownGroup {
		t.Errorf("SysProcAttr %+v, own group %v; want the session kept and the group the server's", cmd.SysProcAttr, p.ownGroup)
	}
	sid, err := getsid(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if sid != cmd.Process.Pid {
		t.Errorf("session %d; want the server's own (%d)", sid, cmd.Process.Pid)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("after Close: kill(0) = %v, want ESRCH", err)
	}
}

// stdioCommand is the stdio test server's command.
func stdioCommand(t *testing.T) *exec.Cmd {
	t.Helper()
	return exec.Command(stdioServer)
}

func getsid(pid int) (int, error) { return unix.Getsid(pid) }

// TestExitCauseLogged: a stdio server that exits with an error before it
// answers initialize is retried with how it exited in the error, where the
// SDK said only "client is closing: EOF".
func TestExitCauseLogged(t *testing.T) {
	t.Parallel()
	g, _ := newGateway(t)
	logs := &logbuf.Buffer{}
	g.log = slog.New(slog.NewTextHandler(logs, nil))
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "dies", Command: "/bin/sh", Args: []string{"-c", "exit 3"}}}); err != nil {
		t.Fatal(err)
	}
	const want = "(the server exited: exit status 3)"
	for limit := time.Now().Add(waitLimit); !strings.Contains(logs.String(), want); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("the log does not say %q:\n%s", want, logs)
		}
	}
}
