package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// run runs argv under sb and returns the supervisor's PID, how the command
// ended and its output.
func run(t *testing.T, sb *Sandbox, argv ...string) (int, Exit, string) {
	t.Helper()
	dir := t.TempDir()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	p, err := sb.Start(context.Background(), Run{Path: argv[0], Argv: argv, Dir: dir, Writable: []string{dir}, Output: pw, Grace: time.Second})
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(pr)
	e, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return p.PID(), e, string(out)
}

// idle waits until sb has Spares supervisors waiting and returns their
// PIDs, oldest first.
func idle(t *testing.T, sb *Sandbox) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb.pool.mu.Lock()
		var pids []int
		for _, sup := range sb.pool.idle {
			pids = append(pids, sup.cmd.Process.Pid)
		}
		sb.pool.mu.Unlock()
		if len(pids) == Spares {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spares after 10s, want %d", len(pids), Spares)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// status returns the fields of /proc/pid/status.
func status(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

func newTestSandbox(t *testing.T) *Sandbox {
	t.Helper()
	sb, _, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	return sb
}

// TestSpares checks that commands run in supervisors started before the
// call: a spare (started, prepared: no capabilities, no new privileges,
// no child) for a command that finds no warm supervisor, and the warm one
// a command left (used last first) for the next command of the same uid;
// and that after the first command the sandbox keeps Spares spares.
func TestSpares(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	sb.pool.mu.Lock()
	n := len(sb.pool.idle) + sb.pool.starting
	sb.pool.mu.Unlock()
	if n != 0 {
		t.Errorf("%d spares before the first command; want none", n)
	}
	first, e, out := run(t, sb, "/bin/sh", "-c", "echo hi")
	if e.Code != 0 || out != "hi\n" {
		t.Fatalf("first command: %+v, output %q", e, out)
	}
	spares := idle(t, sb)
	for _, pid := range spares {
		if pid == first {
			t.Errorf("spare %d is the first command's supervisor", pid)
		}
		// The thread that forks the command is the main one, whose status
		// this is. A spare may still be starting.
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := status(t, pid)
			if st["CapEff"] == "0000000000000000" && st["CapBnd"] == "0000000000000000" && st["NoNewPrivs"] == "1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("spare %d: CapEff %s, CapBnd %s, NoNewPrivs %s; want no capabilities and no new privileges", pid, st["CapEff"], st["CapBnd"], st["NoNewPrivs"])
			}
			time.Sleep(5 * time.Millisecond)
		}
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children"); len(strings.TrimSpace(string(b))) > 0 {
			t.Errorf("spare %d has children %s", pid, b)
		}
	}
	second, e, out := run(t, sb, "/bin/sh", "-c", "echo again; exit 3")
	if e.Code != 3 || out != "again\n" {
		t.Errorf("second command: %+v, output %q", e, out)
	}
	if second != first {
		t.Errorf("the second command ran in supervisor %d; want the first's, warm, %d (spares %v)", second, first, spares)
	}
	if got := idle(t, sb); got[0] != spares[0] || got[1] != spares[1] {
		t.Errorf("spares %v after a command in a warm supervisor; want %v untouched", got, spares)
	}
	// Two at once: the second takes the oldest spare.
	started := make(chan struct{})
	var held int
	go func() {
		defer close(started)
		held, _, _ = run(t, sb, "/bin/sh", "-c", "exec sleep 7413")
	}()
	var sleeper []string
	for deadline := time.Now().Add(10 * time.Second); len(sleeper) == 0; sleeper = testenv.Processes("sleep\x007413") {
		if time.Now().After(deadline) {
			t.Fatal("the blocking command did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	third, _, _ := run(t, sb, "/bin/true")
	pid, _ := strconv.Atoi(strings.SplitN(sleeper[0], ":", 2)[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-started
	if held != first || third != spares[0] {
		t.Errorf("two commands at once ran in %d and %d; want the warm %d and the oldest spare %d", held, third, first, spares[0])
	}
}

// TestDeadSpare kills the spares from outside (as the OOM killer might):
// the next command still runs, in a supervisor of its own.
func TestDeadSpare(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	run(t, sb, "/bin/true")
	spares := idle(t, sb)
	for _, pid := range spares {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	// Dead, not yet reaped: once its threads are gone, the zombie's end of
	// the connection is closed.
	for _, pid := range spares {
		for deadline := time.Now().Add(10 * time.Second); status(t, pid)["State"][0] != 'Z' || status(t, pid)["Threads"] != "1"; {
			if time.Now().After(deadline) {
				t.Fatalf("spare %d: still %s after SIGKILL", pid, status(t, pid)["State"])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pid, e, out := run(t, sb, "/bin/sh", "-c", "echo alive")
	if e.Code != 0 || out != "alive\n" || e.Error != "" {
		t.Errorf("after the spares died: %+v, output %q", e, out)
	}
	for _, s := range spares {
		if pid == s {
			t.Errorf("the command ran in the dead spare %d", pid)
		}
	}
}

// TestCloseEndsSpares checks Close ends every spare, and that commands
// still run afterwards, without new spares.
func TestCloseEndsSpares(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	run(t, sb, "/bin/true")
	spares := idle(t, sb)
	sb.Close()
	for _, pid := range spares {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("spare %d after Close: %v; want it gone", pid, err)
		}
	}
	if _, e, _ := run(t, sb, "/bin/true"); e.Code != 0 {
		t.Errorf("a command after Close: %+v", e)
	}
	time.Sleep(50 * time.Millisecond)
	sb.pool.mu.Lock()
	defer sb.pool.mu.Unlock()
	if n := len(sb.pool.idle) + sb.pool.starting; n != 0 {
		t.Errorf("%d spares after Close; want none", n)
	}
}

// TestSpecTooLarge checks a command past supervisor.MaxSpec is refused
// with an error that says so, and does not cost the pool its spares.
func TestSpecTooLarge(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	run(t, sb, "/bin/true")
	spares := idle(t, sb)
	dir := t.TempDir()
	_, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	_, err = sb.Start(context.Background(), Run{Path: "/bin/echo", Argv: []string{"echo", strings.Repeat("x", 200<<10)}, Dir: dir, Writable: []string{dir}, Output: pw, Grace: time.Second})
	if err == nil || !strings.Contains(err.Error(), "the sandbox takes at most") {
		t.Errorf("a 200 KiB argument: %v; want an error saying the limit", err)
	}
	if got := idle(t, sb); got[0] != spares[0] || got[1] != spares[1] {
		t.Errorf("spares %v after the refused command; want %v still", got, spares)
	}
}

// TestSupervisorKilledBackstop kills a command's supervisor from outside
// (as the OOM killer might) while the command runs with a child in a
// session of its own: Wait reports that the supervisor ended without a
// status, and ends, from the tree the supervisor last reported, what the
// parent-death signal does not reach.
func TestSupervisorKilledBackstop(t *testing.T) {
	t.Parallel()
	sb := newTestSandbox(t)
	dir := t.TempDir()
	_, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	p, err := sb.Start(context.Background(), Run{Path: "/bin/sh", Argv: []string{"sh", "-c", "setsid sleep 7411 & sleep 7412"}, Dir: dir, Writable: []string{dir}, Output: pw, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"sleep\x007411", "sleep\x007412"} {
		for deadline := time.Now().Add(10 * time.Second); len(testenv.Processes(m)) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%q did not start", m)
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // the watchdog reports the tree every 100 ms
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err == nil || !strings.Contains(err.Error(), "without reporting") {
		t.Errorf("Wait after the supervisor's death: %v; want an error saying it ended without reporting", err)
	}
	for _, m := range []string{"sleep\x007411", "sleep\x007412"} {
		for deadline := time.Now().Add(10 * time.Second); len(testenv.Processes(m)) > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("%q outlived its dead supervisor: %q", m, testenv.Processes(m))
				break
			}
		}
	}
}
