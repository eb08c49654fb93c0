package runcommand_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/workspace/usage"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// newSandbox returns a sandbox that enforces every restriction, or reports
// the kernel's lack of one as missing; its spare supervisors end with the
// test.
func newSandbox(tb testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	tb.Helper()
	cfg.Mode = sandbox.Required
	cfg.Accept = []string{sandbox.GapOwnerFiles} // one workspace: commands have the server's uid
	sb, _, err := sandbox.New(cfg)
	if err != nil {
		testenv.Missing(tb, "a kernel sandbox ("+err.Error()+")")
	}
	tb.Cleanup(sb.Close)
	return sb
}

// TestSandboxResults checks what a sandboxed command sees and what its
// result says: its TMPDIR and the workspace are writable, outside is not,
// denials and limits come with a line saying what the sandbox did, and the
// details name the restrictions.
func TestSandboxResults(t *testing.T) {
	t.Parallel()
	c := wt.NewCorpus(t)
	tool := runcommand.New(c.WS, runcommand.Options{Shell: true, Sandbox: newSandbox(t, sandbox.Config{MemoryBytes: 256 << 20, CPUSeconds: 1, MaxFileBytes: 1 << 20})})
	tests := []struct {
		name, command string
		isErr         bool
		want          []string
	}{
		{"workspace and TMPDIR writable", `echo x > $TMPDIR/a && cat $TMPDIR/a; echo y > f && cat f; case $TMPDIR in /*/toolwire-calls-*/call-*) echo private;; esac`, false, []string{"x\ny\nprivate\n"}},
		{"outside denied", `echo bad > ../outside.txt`, true, []string{"Permission denied", "the sandbox lets commands write, change file modes, owners and times, connect to Unix sockets and lock files only in the workspace and $TMPDIR"}},
		{"network denied", `python3 -c 'import socket; socket.create_connection(("127.0.0.1", 22))'`, true, []string{"Permission denied", "the sandbox denies network access"}},
		{"memory limit", `python3 -c "b = bytearray(1 << 30)"`, true, []string{"MemoryError", "sandbox.memory_bytes: 268435456"}},
		{"cpu limit", `while :; do :; done`, true, []string{"killed by signal: CPU time limit exceeded", "sandbox.cpu_seconds: 1"}},
		// A child past max_file_bytes: the command ends on its own exit
		// code, so only its output tells; the result must name the limit.
		{"file size limit in a child", `python3 -c "open('big', 'wb').write(b'x' * (2 << 20))"; exit 1`, true, []string{"File too large", "sandbox.max_file_bytes: 1048576 bytes"}},
		{"cpu limit in a child", `python3 -c "while 1: pass"; exit 1`, true, []string{"exit code 1\n", "CPU time limit exceeded", "sandbox.cpu_seconds: 1"}},
		{"limits applied", `grep -E "cpu time|address space|core file" /proc/self/limits`, false, []string{"Max cpu time              1                    2", "Max address space         268435456", "Max core file size        0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := wt.Call(t, tool, `{"command":`+wt.Quote(tt.command)+`}`)
			text := wt.Text(res)
			for _, w := range tt.want {
				if res.IsError != tt.isErr || !strings.Contains(text, strings.ReplaceAll(w, "\\n", "\n")) {
					t.Errorf("result (error %v):\n%s\nwant error %v and %q", res.IsError, text, tt.isErr, w)
				}
			}
			var d runcommand.Details
			wt.Details(t, res, &d)
			if d.Sandbox == nil || d.Sandbox.Mode != sandbox.Required || !d.Sandbox.Files || !d.Sandbox.Syscalls {
				t.Errorf("details.sandbox %+v", d.Sandbox)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(c.Parent, "outside.txt")); err != nil {
		t.Error(err)
	}
}

// TestSandboxEnvironmentAndTmpdir checks a sandboxed command gets only the
// allowed environment and its TMPDIR (not the supervisor's spec), and that
// the TMPDIR is gone after the call.
func TestSandboxEnvironmentAndTmpdir(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	tool := runcommand.New(e.WS, runcommand.Options{Sandbox: newSandbox(t, sandbox.Config{})})
	res := wt.Call(t, tool, `{"argv":["env"]}`)
	lines := strings.Split(strings.TrimSpace(wt.Text(res)), "\n")
	if len(lines) != 3 || lines[1] != "PATH="+runcommand.DefaultPath || !strings.HasPrefix(lines[2], "TMPDIR=") {
		t.Fatalf("env:\n%s\nwant PATH and TMPDIR only", wt.Text(res))
	}
	tmp := strings.TrimPrefix(lines[2], "TMPDIR=")
	// Only stdin, stdout and stderr: not the supervisor's status pipe or
	// Landlock ruleset, nor what the server inherited (fd 3 below is ls's
	// own, reading the folder).
	if res := wt.Call(t, tool, `{"argv":["ls","/proc/self/fd"]}`); wt.Text(res) != "exit code 0\n0\n1\n2\n3\n" {
		t.Errorf("open descriptors:\n%s\nwant 0 1 2 (and 3, the listing's own)", wt.Text(res))
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the call's TMPDIR %s is still there after the call: %v", tmp, err)
	}
}

// TestSandboxMinFree runs `sleep 5` under the sandbox asking it to keep 1
// TiB more free on the workspace's disk than statfs says it has: the
// watchdog ends the command at a sample, naming workspace_min_free_bytes
// and the root. With no reserve the same command (shorter) ends on its
// own.
func TestSandboxMinFree(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, sandbox.Config{})
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	free, err := usage.Free(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	run := func(argv []string, minFree uint64) sandbox.Exit {
		p, err := sb.Start(t.Context(), sandbox.Run{Path: "/bin/sleep", Argv: argv, Dir: dir, Writable: []string{dir},
			Output: out, Grace: time.Second, MinFreeBytes: minFree})
		if err != nil {
			t.Fatal(err)
		}
		exit, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return exit
	}
	if e := run([]string{"sleep", "5"}, free+1<<40); e.Limit != "workspace_min_free_bytes" || !strings.Contains(e.Detail, dir) {
		t.Errorf("a reserve past the disk's room: %+v; want the command ended as past workspace_min_free_bytes, naming %s", e, dir)
	}
	if e := run([]string{"sleep", "0.3"}, 0); e.Limit != "" || e.Code != 0 {
		t.Errorf("no reserve: %+v; want exit 0", e)
	}
}

// TestSandboxNoteMinFree checks the line a command the watchdog ended for
// the disk's reserve gets: the setting, its value, where, and what to do.
func TestSandboxNoteMinFree(t *testing.T) {
	t.Parallel()
	note := runcommand.SandboxNote(sandbox.Config{}, 0, 1<<30, sandbox.Exit{Code: -1, Limit: "workspace_min_free_bytes", Detail: "the file system holding /ws has 5 bytes left"}, "")
	for _, w := range []string{"workspace_min_free_bytes: 1073741824 bytes", "(the file system holding /ws has 5 bytes left)", "remove files"} {
		if !strings.Contains(note, w) {
			t.Errorf("note %q; want %q in it", note, w)
		}
	}
}

// TestSandboxNoteUIDProcesses: a command that could not fork under a
// server whose RLIMIT_NPROC is small (40: its commands' together get 20)
// was told only of max_processes (1024), which it was nowhere near.
func TestSandboxNoteUIDProcesses(t *testing.T) {
	t.Parallel()
	note := runcommand.SandboxNote(sandbox.Config{MaxProcesses: 1024}, 20, 0, sandbox.Exit{Code: 2}, "/bin/sh: 1: Cannot fork\n")
	for _, w := range []string{"sandbox.max_processes: 1024", "20 for every command running under this uid together", "RLIMIT_NPROC"} {
		if !strings.Contains(note, w) {
			t.Errorf("note %q; want %q in it", note, w)
		}
	}
	if note := runcommand.SandboxNote(sandbox.Config{MaxProcesses: 1024}, 0, 0, sandbox.Exit{Code: 2}, "Cannot fork"); strings.Contains(note, "RLIMIT_NPROC") {
		t.Errorf("note %q with no RLIMIT_NPROC names it", note)
	}
}

// BenchmarkSandboxOverhead measures what the sandbox adds to one command:
// 500 runs of true through run_command, sandboxed and off, in the same
// process, reported as p50/p99 of each and the ratio of the p50s.
func BenchmarkSandboxOverhead(b *testing.B) {
	e := wt.New(b, nil)
	sb := newSandbox(b, sandbox.Config{})
	off := runcommand.New(e.WS, runcommand.Options{})
	on := runcommand.New(e.WS, runcommand.Options{Sandbox: sb})
	const runs = 500
	measure := func(tool tools.Tool, n int) []time.Duration {
		d := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if res := wt.Call(b, tool, `{"argv":["true"]}`); res.IsError {
				b.Fatalf("true failed: %s", wt.Text(res))
			}
			d = append(d, time.Since(start))
		}
		return d
	}
	for b.Loop() {
		// Interleaved halves, so drift in the machine's load hits both.
		var offD, onD []time.Duration
		for range 2 {
			offD = append(offD, measure(off, runs/2)...)
			onD = append(onD, measure(on, runs/2)...)
		}
		slices.Sort(offD)
		slices.Sort(onD)
		pct := func(d []time.Duration, p int) float64 { return float64(d[len(d)*p/100].Microseconds()) / 1000 }
		b.ReportMetric(pct(offD, 50), "off-p50-ms")
		b.ReportMetric(pct(offD, 99), "off-p99-ms")
		b.ReportMetric(pct(onD, 50), "sandbox-p50-ms")
		b.ReportMetric(pct(onD, 99), "sandbox-p99-ms")
		b.ReportMetric(pct(onD, 50)-pct(offD, 50), "added-p50-ms")
		b.ReportMetric(pct(onD, 50)/pct(offD, 50), "p50-ratio")
	}
}

// BenchmarkSandboxUIDOverhead is BenchmarkSandboxOverhead with a workspace
// per session, interleaving three kinds of run: unsandboxed, sandboxed
// under the server's uid, and sandboxed under a uid of the session's own
// (root only): the cost of separate uids (the supervisor's and the
// command's change of credentials, and the session's TMPDIR given to it).
func BenchmarkSandboxUIDOverhead(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("a uid per session needs root (or CAP_SETUID and the rest)")
	}
	shared := newSandbox(b, sandbox.Config{})
	own := newSandbox(b, sandbox.Config{UIDRange: "320000-320009"})
	u := own.UIDs()
	sessions := func(uids *workspace.IDRange) *workspace.Sessions {
		root := b.TempDir()
		if err := os.Chmod(filepath.Dir(root), 0o755); err != nil { // the session's uid passes through it
			b.Fatal(err)
		}
		s, err := workspace.OpenSessions(root, workspace.SessionOptions{UIDs: uids})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	plain, separate := sessions(nil), sessions(&workspace.IDRange{First: u.First, Last: u.Last})
	tools3 := []tools.Tool{
		runcommand.New(plain, runcommand.Options{}),
		runcommand.New(plain, runcommand.Options{Sandbox: shared}),
		runcommand.New(separate, runcommand.Options{Sandbox: own}),
	}
	call := func(tool tools.Tool) time.Duration {
		args := json.RawMessage(`{"argv":["true"]}`)
		c := tools.NewCall("c", tool.Name, args, nil)
		c.SessionID = "bench"
		defer c.Close()
		start := time.Now()
		res, err := tool.Handler(context.Background(), c)
		if err != nil || res.IsError {
			b.Fatalf("true: %v %+v", err, res)
		}
		return time.Since(start)
	}
	const runs = 300
	for b.Loop() {
		d := make([][]time.Duration, 3)
		for i := range runs {
			k := i % 3
			d[k] = append(d[k], call(tools3[k]))
		}
		p50 := func(x []time.Duration) float64 {
			slices.Sort(x)
			return float64(x[len(x)/2].Microseconds()) / 1000
		}
		off, sb, uid := p50(d[0]), p50(d[1]), p50(d[2])
		b.ReportMetric(off, "off-p50-ms")
		b.ReportMetric(sb, "sandbox-p50-ms")
		b.ReportMetric(uid, "uid-p50-ms")
		b.ReportMetric(uid-sb, "uid-added-p50-ms")
	}
}

// TestRunCommandOutOfFiles: a command the server cannot start for want of
// file descriptors gets a result saying so, to retry, whichever step met
// the shortage: not an error with no result (pipe2's, before), nor the
// errno deep in the supervisor's start ("BUG(go-landlock): This should not
// have happened: landlock_create_ruleset: too many open files"). Not
// parallel: it takes the process's descriptors.
func TestRunCommandOutOfFiles(t *testing.T) {
	e := wt.New(t, nil)
	tools := map[string]*runcommand.Options{"unsandboxed": {}, "sandboxed": {Sandbox: newSandbox(t, sandbox.Config{})}}
	for name, opts := range tools {
		tool := runcommand.New(e.WS, *opts)
		for leave := range 12 {
			release := wt.OutOfFiles(t, leave)
			res, err := wt.CallContext(t.Context(), t, tool, `{"argv":["true"]}`, nil)
			release()
			if err != nil {
				t.Errorf("%s, %d descriptors free: error %v, no result", name, leave, err)
				continue
			}
			text := wt.Text(res)
			if res.IsError && !strings.Contains(text, "cannot start the command now: the server has as many files open as it may (too many open files); try again shortly") &&
				!strings.Contains(text, "cannot reach . now: the server has as many files open as it may") {
				t.Errorf("%s, %d descriptors free: %q; want it to say the server is out of open files", name, leave, text)
			}
		}
		if res := wt.Call(t, tool, `{"argv":["true"]}`); res.IsError {
			t.Errorf("%s with descriptors free again: %q", name, wt.Text(res))
		}
	}
}

// TestSandboxFallocate: fallocate took a gigabyte of disk per call at once,
// between the watchdog's samples, so a command of a few milliseconds left
// the disk short of workspace_min_free_bytes (two 1000 MiB fallocates in
// 40 ms). The supervisor now performs it only when it leaves the reserve
// (else ENOSPC), and holds it to max_file_bytes itself.
func TestSandboxFallocate(t *testing.T) {
	t.Parallel()
	testenv.LookPath(t, "fallocate")
	sb := newSandbox(t, sandbox.Config{MaxFileBytes: 1 << 30})
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	free, err := usage.Free(dir)
	if err != nil {
		t.Fatal(err)
	}
	const margin = 256 << 20 // what the disk may lose meanwhile to others
	if free < 2*margin {
		testenv.Missing(t, "512 MiB free on the disk of the test's temporary folder")
	}
	run := func(minFree uint64, script string) string {
		out, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		p, err := sb.Start(t.Context(), sandbox.Run{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Dir: dir, Writable: []string{dir},
			Output: out, Grace: time.Second, MinFreeBytes: minFree})
		if err != nil {
			t.Fatal(err)
		}
		if exit, err := p.Wait(); err != nil || exit.Limit != "" {
			t.Fatalf("exit %+v, %v; want the command to end on its own", exit, err)
		}
		b, err := os.ReadFile(out.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The reserve leaves less than a gigabyte: 1 GiB is refused, 1 MiB is not.
	got := run(free-margin, "fallocate -l 1G big; echo rc=$?; fallocate -l 1M small && echo small ok; stat -c 'big %s' big")
	for _, w := range []string{"No space left on device", "rc=1", "small ok", "big 0"} {
		if !strings.Contains(got, w) {
			t.Errorf("under a reserve of all but %d bytes:\n%s\nwant %q", margin, got, w)
		}
	}
	// max_file_bytes holds, as RLIMIT_FSIZE would: EFBIG and SIGXFSZ.
	got = run(0, "fallocate -o 1 -l 1G past; echo rc=$?; fallocate --punch-hole -l 1M small; echo punched rc=$?")
	for _, w := range []string{"File size limit exceeded", "punched rc=0"} {
		if !strings.Contains(got, w) {
			t.Errorf("past max_file_bytes:\n%s\nwant %q", got, w)
		}
	}
}
