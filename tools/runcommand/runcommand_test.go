package runcommand_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRunCommand(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"sub/f.txt": "content\n", "script.sh": "#!/bin/sh\necho script in $(pwd)\n"})
	if err := os.Chmod(filepath.Join(e.Dir, "script.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(e.Dir, "up")); err != nil {
		t.Fatal(err)
	}
	tool := runcommand.New(e.WS, runcommand.Options{})
	tests := []struct {
		name, args string
		isErr      bool
		text       string
		exit       int
	}{
		{"argv", `{"argv":["echo","hello world"]}`, false, "exit code 0\nhello world\n", 0},
		{"no shell in argv", `{"argv":["echo","$HOME","|","x"]}`, false, "exit code 0\n$HOME | x\n", 0},
		{"stdout and stderr in order, non-zero exit", `{"argv":["sh","-c","echo out; echo err >&2; echo out2; exit 3"]}`, true, "exit code 3\nout\nerr\nout2\n", 3},
		{"no output", `{"argv":["true"]}`, false, "exit code 0\n(no output)\n", 0},
		{"cwd", `{"argv":["cat","f.txt"],"cwd":"sub"}`, false, "exit code 0\ncontent\n", 0},
		{"relative program runs from cwd", `{"argv":["./script.sh"]}`, false, "exit code 0\nscript in " + e.Dir + "\n", 0},
		{"stdin is empty", `{"argv":["cat"]}`, false, "exit code 0\n(no output)\n", 0},
		{"killed by a signal", `{"argv":["sh","-c","kill -KILL $$"]}`, true, "killed by signal: killed\n(no output)\n", -1},
		{"cwd outside", `{"argv":["pwd"],"cwd":".."}`, true, "path escapes the workspace: ..", 0},
		{"cwd through a symlink outside", `{"argv":["pwd"],"cwd":"up"}`, true, "path escapes the workspace: up (a symlink or .. leads outside)", 0},
		{"cwd is a file", `{"argv":["pwd"],"cwd":"sub/f.txt"}`, true, "cwd sub/f.txt is not a folder", 0},
		{"missing program", `{"argv":["no-such-program-xyz"]}`, true, `program "no-such-program-xyz" not found in PATH ` + runcommand.DefaultPath, 0},
		{"empty program", `{"argv":[""]}`, true, "argv is empty: give the program to run and its arguments", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := wt.Call(t, tool, tt.args)
			if res.IsError != tt.isErr || wt.Text(res) != tt.text {
				t.Fatalf("result (error %v):\n%s\nwant (error %v):\n%s", res.IsError, wt.Text(res), tt.isErr, tt.text)
			}
			if res.Details == nil {
				return
			}
			var d runcommand.Details
			wt.Details(t, res, &d)
			if d.ExitCode != tt.exit || d.OutputBytes != int64(len(strings.SplitN(tt.text, "\n", 2)[1])) && !strings.Contains(tt.text, "(no output)") {
				t.Errorf("details %+v", d)
			}
		})
	}
}

func TestRunCommandSchemas(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	argv := runcommand.New(e.WS, runcommand.Options{})
	shell := runcommand.New(e.WS, runcommand.Options{Shell: true})
	reg, err := tools.NewRegistry(argv)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := reg.Snapshot().Lookup("run_command")
	for _, args := range []string{`{"command":"ls"}`, `{"argv":[]}`, `{}`} {
		if _, err := a.ValidateArguments(args); err == nil {
			t.Errorf("argv mode accepts %s", args)
		}
	}
	reg, err = tools.NewRegistry(shell)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := reg.Snapshot().Lookup("run_command")
	if _, err := s.ValidateArguments(`{"argv":["ls"]}`); err == nil {
		t.Error("shell mode accepts argv")
	}
	want := tools.Annotations{Destructive: true, OpenWorld: true}
	if argv.Annotations != want || shell.Annotations != want {
		t.Errorf("annotations %+v, %+v; want %+v", argv.Annotations, shell.Annotations, want)
	}
	res := wt.Call(t, shell, `{"command":"echo $((1+2)) | tr 3 x; pwd","cwd":"."}`)
	if wt.Text(res) != "exit code 0\nx\n"+e.Dir+"\n" {
		t.Errorf("shell mode: %q", wt.Text(res))
	}
}

// TestRunCommandEnvironment checks that commands see only the allowed
// variables, and a minimal PATH when PATH is not among them.
func TestRunCommandEnvironment(t *testing.T) {
	t.Setenv("TOOLWIRE_TEST_ALLOWED", "yes")
	t.Setenv("TOOLWIRE_TEST_SECRET", "no")
	e := wt.New(t, nil)
	res := wt.Call(t, runcommand.New(e.WS, runcommand.Options{Env: []string{"TOOLWIRE_TEST_ALLOWED", "TOOLWIRE_TEST_UNSET"}}), `{"argv":["env"]}`)
	want := "exit code 0\nTOOLWIRE_TEST_ALLOWED=yes\nPATH=" + runcommand.DefaultPath + "\n"
	if wt.Text(res) != want {
		t.Errorf("env:\n%s\nwant:\n%s", wt.Text(res), want)
	}
	t.Setenv("PATH", "/bin:/usr/bin")
	res = wt.Call(t, runcommand.New(e.WS, runcommand.Options{Env: []string{"PATH"}}), `{"argv":["env"]}`)
	if want := "exit code 0\nPATH=/bin:/usr/bin\n"; wt.Text(res) != want {
		t.Errorf("env with PATH allowed:\n%s\nwant:\n%s", wt.Text(res), want)
	}
}

// TestRunCommandOutputCap keeps the head and the tail of a long output,
// and counts all of it.
func TestRunCommandOutputCap(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	tool := runcommand.New(e.WS, runcommand.Options{MaxOutputBytes: 100})
	res := wt.Call(t, tool, `{"argv":["seq","1","100000"]}`)
	var all strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&all, "%d\n", i)
	}
	full := all.String()
	omitted := len(full) - 100
	want := "exit code 0\n" + full[:50] + fmt.Sprintf("\n[... %d bytes of output left out ...]\n", omitted) + full[len(full)-50:]
	if wt.Text(res) != want {
		t.Errorf("text:\n%s\nwant:\n%s", wt.Text(res), want)
	}
	var d runcommand.Details
	wt.Details(t, res, &d)
	if d.OutputBytes != int64(len(full)) || !d.Truncated {
		t.Errorf("details %+v; want %d output bytes, truncated", d, len(full))
	}
}

// recorder collects a call's streamed output.
type recorder struct {
	mu      sync.Mutex
	chunks  []string
	first   chan string // the first chunk, once
	delay   time.Duration
	onChunk func(string) // when set, sees each chunk
}

func newRecorder() *recorder { return &recorder{first: make(chan string, 1)} }

func (r *recorder) report(p tools.Progress) {
	if p.Output == "" {
		return
	}
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.chunks) == 0 {
		r.first <- p.Output
	}
	r.chunks = append(r.chunks, p.Output)
	if r.onChunk != nil {
		r.onChunk(p.Output)
	}
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.chunks...)
}

// TestRunCommandStreams checks that a chatty command's output is streamed
// whole, in lines, and in far fewer events than lines: at most one per
// interval (plus the last).
//
// The command first writes a line and a prompt in one write, into an empty
// pipe, so the pump reads both at once: the line is streamed, the prompt
// held back until it has waited an interval, and the command waits until the
// test has seen the prompt on its own. Nothing here depends on how fast the
// command or the pump runs; the timeout only ends a test that would hang.
// (Chunks of seq's output may end mid-line: seq writes in blocks, and under
// load a block's partial last line can wait an interval, which is the rule.)
func TestRunCommandStreams(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	const interval = 50 * time.Millisecond
	tool := runcommand.New(e.WS, runcommand.Options{OutputInterval: interval, MaxStreamBytes: 8 << 20, MaxOutputBytes: 8 << 20})
	rec := newRecorder()
	rec.onChunk = func(c string) {
		if strings.HasSuffix(c, "prompt> ") {
			e.Write(t, "go-on", "")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	res, err := wt.CallContext(ctx, t, tool, `{"argv":["sh","-c","printf 'first\\nprompt> '; while [ ! -e go-on ]; do sleep 0.01; done; echo answer; seq 1 50000"]}`, rec.report)
	elapsed := time.Since(start)
	if err != nil || res.IsError {
		t.Fatalf("%v, %q", err, wt.Text(res))
	}
	chunks := rec.all()
	output := strings.TrimPrefix(wt.Text(res), "exit code 0\n")
	if got := strings.Join(chunks, ""); got != output {
		t.Errorf("streamed %d bytes, result has %d; they differ", len(got), len(output))
	}
	if limit := int(elapsed/interval) + 2; len(chunks) > limit {
		t.Errorf("%d chunks in %v; the rate limit allows %d", len(chunks), elapsed, limit)
	}
	// A chunk ends at a line's end, but for a partial line (a prompt, a
	// progress bar), which is streamed once it has waited an interval.
	if len(chunks) < 2 || chunks[0] != "first\n" || chunks[1] != "prompt> " {
		var first []string
		for _, c := range chunks[:min(len(chunks), 2)] {
			first = append(first, c[:min(len(c), 40)])
		}
		t.Errorf("first chunks %q; want the line, then the prompt on its own", first)
	}
}

// TestRunCommandSlowClient streams to a client slower than the command:
// the command is not slowed down to the client's pace, the stream says what
// it left out and ends with the command's last output, and the result
// holds all the output.
func TestRunCommandSlowClient(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	tool := runcommand.New(e.WS, runcommand.Options{OutputInterval: 10 * time.Millisecond, MaxStreamBytes: 1000, MaxOutputBytes: 8 << 20})
	rec := newRecorder()
	rec.delay = 100 * time.Millisecond
	res, err := wt.CallContext(context.Background(), t, tool, `{"argv":["seq","1","200000"]}`, rec.report)
	if err != nil || res.IsError {
		t.Fatalf("%v, %q", err, wt.Text(res))
	}
	var d runcommand.Details
	wt.Details(t, res, &d)
	if d.OutputBytes != 1288895 || d.Truncated || !strings.HasSuffix(wt.Text(res), "\n200000\n") {
		t.Errorf("details %+v", d)
	}
	if streamed := strings.Join(rec.all(), ""); !strings.Contains(streamed, "bytes of output not streamed") {
		t.Errorf("the stream does not say it left output out (%d bytes streamed)", len(streamed))
	} else if !strings.HasSuffix(streamed, "\n199999\n200000\n") {
		// What it leaves out is the oldest output waiting: the stream
		// ends as the command did.
		t.Errorf("the stream ends %q; want the command's last lines", streamed[max(len(streamed)-40, 0):])
	}
}

// groupAlive returns the processes of group pgid that still run. Zombies
// count as gone: they run nothing and wait only for their reaper, which in a
// container may never come.
func groupAlive(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	var alive []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			alive = append(alive, pid)
		}
	}
	return alive
}

// waitGone waits until group pgid has no running process. A SIGKILLed
// process takes a moment to die, so this polls; the bound is generous
// and only reached when something is wrong.
func waitGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Kill(-pgid, 0)
		alive := groupAlive(t, pgid)
		if errors.Is(err, syscall.ESRCH) || len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still runs %v", pgid, alive)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunCommandKillsTheGroup ends commands that leave background children
// running: by cancellation, by timeout, by children that ignore SIGTERM, and
// by the command exiting first. In each case no process of the group is
// left: with the sandbox off (the group kill) and on (the supervisor).
func TestRunCommandKillsTheGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  string
		timeout time.Duration // 0: cancel after the first output
		result  bool          // the call returns a result rather than ctx's error
	}{
		{"cancelled", `echo $$; sleep 30 & sleep 30 & wait`, 0, false},
		{"timed out", `echo $$; sleep 30 & sleep 30 & wait`, time.Second, false},
		{"children ignore SIGTERM", `trap '' TERM; echo $$; sleep 30 & sleep 30 & wait`, 0, false},
		{"command exits first", `sleep 30 & (trap '' TERM; sleep 30) & echo $$`, time.Minute, true},
	}
	for _, mode := range []string{"off", "sandboxed"} {
		for _, tt := range tests {
			t.Run(mode+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				e := wt.New(t, nil)
				opts := runcommand.Options{KillGrace: 200 * time.Millisecond}
				if mode == "sandboxed" {
					opts.Sandbox = newSandbox(t, sandbox.Config{})
				}
				tool := runcommand.New(e.WS, opts)
				if mode == "sandboxed" {
					// A first command starts a supervisor, which on a loaded
					// machine (and under the race detector) can take longer
					// than the timed-out case's second; the command under
					// test then finds it warm, as a server's commands do.
					if res := wt.Call(t, tool, `{"argv":["true"]}`); res.IsError {
						t.Fatalf("true: %s", wt.Text(res))
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				rec := newRecorder()
				type outcome struct {
					res *tools.Result
					err error
				}
				done := make(chan outcome, 1)
				go func() {
					res, err := wt.CallContext(ctx, t, tool, `{"argv":["sh","-c",`+wt.Quote(tt.script)+`]}`, rec.report)
					done <- outcome{res, err}
				}()
				var first string
				select {
				case first = <-rec.first:
				case got := <-done:
					t.Fatalf("the call ended before its first output: %v, %v", got.res, got.err)
				}
				pgid, err := strconv.Atoi(strings.TrimSpace(first))
				if err != nil {
					t.Fatal(err)
				}
				if tt.timeout == 0 {
					cancel()
				}
				got := <-done
				switch {
				case tt.result && (got.err != nil || got.res.IsError):
					t.Errorf("result %v, %v; want success", got.res, got.err)
				case !tt.result && !errors.Is(got.err, ctx.Err()):
					t.Errorf("error %v; want the context's %v", got.err, ctx.Err())
				}
				waitGone(t, pgid)
			})
		}
	}
}

func TestDetailsJSON(t *testing.T) {
	t.Parallel()
	e := wt.New(t, map[string]string{"d/x": ""})
	res := wt.Call(t, runcommand.New(e.WS, runcommand.Options{}), `{"argv":["sh","-c","printf 'a\\nb'; exit 1"],"cwd":"d"}`)
	var d runcommand.Details
	wt.Details(t, res, &d)
	d.DurationMS = 0
	want := runcommand.Details{Argv: []string{"sh", "-c", "printf 'a\\nb'; exit 1"}, Cwd: "d", ExitCode: 1, OutputBytes: 3, Sandbox: &sandbox.Restrictions{Mode: sandbox.Off}}
	if diff := cmp.Diff(want, d); diff != "" || !res.IsError || wt.Text(res) != "exit code 1\na\nb" {
		t.Errorf("details (-want +got):\n%s\ntext %q", diff, wt.Text(res))
	}
}

// TestRunCommandEscapedChild runs a command whose child leaves the process
// group (setsid) and keeps the output pipe open: the call still ends, as the
// pipe is closed after the grace.
func TestRunCommandEscapedChild(t *testing.T) {
	t.Parallel()
	setsid := testenv.LookPath(t, "setsid")
	e := wt.New(t, nil)
	tool := runcommand.New(e.WS, runcommand.Options{KillGrace: 100 * time.Millisecond})
	res := wt.Call(t, tool, `{"argv":["sh","-c",`+wt.Quote(setsid+` sleep 30 & echo $!`)+`]}`)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(wt.Text(res), "exit code 0\n")))
	if err != nil {
		t.Fatalf("result %q: %v", wt.Text(res), err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Errorf("the escaped child %d: %v", pid, err)
	}
}

// TestRunCommandCwdEscapes runs commands in every refused folder of the
// escape corpus: each is an error result, and nothing runs.
func TestRunCommandCwdEscapes(t *testing.T) {
	t.Parallel()
	for _, c := range wt.Corpora(t) {
		t.Run(c.Kind, func(t *testing.T) {
			tool := runcommand.New(c.WS, runcommand.Options{})
			for name, p := range c.Refused {
				res := wt.Call(t, tool, `{"argv":["touch","ran"],"cwd":`+wt.Quote(p)+`}`)
				if text := wt.Text(res); !res.IsError || !strings.Contains(text, "path escapes the workspace") {
					t.Errorf("%s (%q): error %v, %q; want an error result saying the path escapes", name, p, res.IsError, text)
				}
			}
			if _, err := os.Stat(filepath.Join(c.Parent, "ran")); err == nil {
				t.Error("a command ran outside the workspace")
			}
			for _, p := range []string{"sub", "sub/deep", c.Dir + "/sub"} {
				if res := wt.Call(t, tool, `{"argv":["pwd"],"cwd":`+wt.Quote(p)+`}`); res.IsError || !strings.HasPrefix(wt.Text(res), "exit code 0\n"+c.Dir+"/sub") {
					t.Errorf("%q: %q", p, wt.Text(res))
				}
			}
		})
	}
}

// TestRunCommandReturnsBeforeTheKillGrace cancels a command that ignores
// SIGTERM under a kill grace of an hour: the call returns anyway, with the
// context's error, while the command still runs (its end goes on in the
// background), and once the test kills the group the background work ends
// too (goleak checks). Before, the call waited out the grace, so the service
// abandoned run_command whenever the grace exceeded its abandon grace.
func TestRunCommandReturnsBeforeTheKillGrace(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"off", "sandboxed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := wt.New(t, nil)
			opts := runcommand.Options{KillGrace: time.Hour}
			if mode == "sandboxed" {
				opts.Sandbox = newSandbox(t, sandbox.Config{})
			}
			tool := runcommand.New(e.WS, opts)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := newRecorder()
			done := make(chan error, 1)
			go func() {
				_, err := wt.CallContext(ctx, t, tool, `{"argv":["sh","-c","trap '' TERM; echo $$; sleep 600"]}`, rec.report)
				done <- err
			}()
			pgid, err := strconv.Atoi(strings.TrimSpace(<-rec.first))
			if err != nil {
				t.Fatal(err)
			}
			defer waitGone(t, pgid)
			defer syscall.Kill(-pgid, syscall.SIGKILL)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("error %v; want the context's", err)
				}
			case <-time.After(time.Minute): // only a hang gets here
				t.Fatal("the cancelled call did not return: it waits for the kill grace")
			}
			if len(groupAlive(t, pgid)) == 0 {
				t.Error("the command ignoring SIGTERM is gone before its grace; the test proves nothing")
			}
		})
	}
}

// TestRunCommandAsksOutsideAllow: a program outside Options.Allow asks for
// approval and runs only once approved; one inside runs without asking;
// without a server to ask, it does not run.
func TestRunCommandAsksOutsideAllow(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	tool := runcommand.New(e.WS, runcommand.Options{Allow: []string{"ec*"}})
	reg, err := tools.NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := reg.Snapshot().Lookup("run_command")
	refused := errors.New("denied: not today")
	run := func(argv string, answer error) (asked string, res *tools.Result, err error) {
		args, err := tl.ValidateArguments(`{"argv":` + argv + `}`)
		if err != nil {
			t.Fatal(err)
		}
		call := tools.NewCall("c", "run_command", args, nil)
		call.SetApprover(func(_ context.Context, reason string) error { asked = reason; return answer })
		res, err = tl.Handler(context.Background(), call)
		return asked, res, err
	}
	if asked, res, err := run(`["echo","hi"]`, refused); asked != "" || err != nil || wt.Text(res) != "exit code 0\nhi\n" {
		t.Errorf("echo (allowed): asked %q, %v, %q; want it run without asking", asked, err, wt.Text(res))
	}
	if asked, _, err := run(`["touch","made"]`, refused); !strings.Contains(asked, `"touch"`) || err != refused {
		t.Errorf("touch, denied: asked %q, error %v; want it to ask naming touch and return the refusal", asked, err)
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "made")); err == nil {
		t.Error("the denied command ran")
	}
	if asked, res, err := run(`["touch","made"]`, nil); asked == "" || err != nil || res.IsError {
		t.Errorf("touch, approved: asked %q, %v, %v; want it run after asking", asked, err, res)
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "made")); err != nil {
		t.Errorf("the approved command did not run: %v", err)
	}
	args, _ := tl.ValidateArguments(`{"argv":["touch","x"]}`)
	if _, err := tl.Handler(context.Background(), tools.NewCall("c", "run_command", args, nil)); !errors.Is(err, tools.ErrNoApprover) {
		t.Errorf("without an approver: %v, want ErrNoApprover", err)
	}
}
