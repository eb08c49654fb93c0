// Package runcommand provides the run_command workspace tool: it runs a
// program in the workspace, streams its output as the call's progress, and
// returns its exit code and output. Operators enable it explicitly; it runs
// an argv without a shell unless they enable shell mode.
//
// With Options.Sandbox set, each command runs under package sandbox's
// supervisor: confined by Landlock, seccomp and resource limits to the
// workspace and a private TMPDIR, and no process it starts outlives the call
// (sandboxed.go). Without it, the program runs with the server's user and can
// reach whatever that user can; what is confined then is the starting folder
// (inside the workspace), the environment (only the names the operator
// allows), and the program's lifetime: when the command ends, times out or is
// cancelled, its whole process group is ended.
//
// Like every built-in tool it imports tools/ (and tools/workspace), never
// engine/, service/, sources/, store/ or client/: it reaches the server only
// through the registry.
package runcommand

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolwire/toolwire/internal/monotime"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace"
)

// drainWait is how long the output pipe may take to close once the process
// group is gone; only a process outside the group can hold it longer.
const drainWait = 250 * time.Millisecond

// DefaultPath is the PATH a command gets when the operator's allowlist does
// not pass the server's own: enough to find the usual programs, without
// whatever the server's environment holds.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// Options configure run_command. Zero values mean the defaults.
type Options struct {
	// Shell makes the tool take a shell string, {command}, run with
	// /bin/sh -c, instead of an argv.
	Shell bool
	// Env names the server's environment variables passed to commands;
	// nothing else is passed, except PATH=DefaultPath when PATH is not named.
	Env []string
	// MaxOutputBytes caps the output kept for the result: its first and last
	// halves, with a marker between (default 64 KiB).
	MaxOutputBytes int
	// OutputInterval is the least time between two streamed output chunks;
	// output arriving in between is batched (default 100ms).
	OutputInterval time.Duration
	// MaxStreamBytes caps the output waiting to be streamed; past it, the
	// oldest output waiting is left out of the stream (not of the result),
	// so the stream ends with the command's last output (default 64 KiB).
	MaxStreamBytes int
	// KillGrace is how long the process group has to exit after SIGTERM before
	// it gets SIGKILL (default 1s). A cancelled call returns at once; the
	// grace and the kill go on in the background (see await).
	KillGrace time.Duration
	// Sandbox runs each command under the sandbox's supervisor; nil runs
	// it with the server's full rights (sandbox mode off).
	Sandbox *sandbox.Sandbox
	// Allow lists the programs (path.Match patterns of the program's base
	// name: "go", "git", "python3*") that run without asking; any other
	// asks a person's approval first (tools.Call.RequestApproval), holding
	// no concurrency slot while it waits. In shell mode the program is the
	// command line's first word. Default empty: every command runs without
	// asking.
	Allow []string
}

func (o Options) withDefaults() Options {
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = 64 << 10
	}
	if o.OutputInterval <= 0 {
		o.OutputInterval = 100 * time.Millisecond
	}
	if o.MaxStreamBytes <= 0 {
		o.MaxStreamBytes = 64 << 10
	}
	if o.KillGrace <= 0 {
		o.KillGrace = time.Second
	}
	return o
}

// Args are run_command's arguments: Argv, or Command in shell mode.
type Args struct {
	Argv    []string `json:"argv,omitempty"`
	Command string   `json:"command,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
}

// Details is what run_command reports to user interfaces.
type Details struct {
	Argv        []string `json:"argv"`
	Cwd         string   `json:"cwd"`
	ExitCode    int      `json:"exit_code"` // -1 when a signal ended the command
	Signal      string   `json:"signal,omitempty"`
	OutputBytes int64    `json:"output_bytes"`
	Truncated   bool     `json:"truncated"`
	DurationMS  int64    `json:"duration_ms"`
	// Sandbox says which restrictions the command ran under.
	Sandbox *sandbox.Restrictions `json:"sandbox,omitempty"`
	// Limit names the sandbox limit that ended the command, if one did.
	Limit string `json:"limit,omitempty"`
}

// The schemas are written out rather than inferred (tools.Typed): one Args
// serves both modes, each with its own required field.
const argvSchema = `{
  "type": "object",
  "properties": {
    "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "the program and its arguments, run without a shell; for example [\"go\", \"test\", \"./...\"]"},
    "cwd": {"type": "string", "description": "the folder to run in, relative to the workspace (default: the workspace)"}
  },
  "required": ["argv"],
  "additionalProperties": false
}`

const shellSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1, "description": "the command line, run with /bin/sh -c"},
    "cwd": {"type": "string", "description": "the folder to run in, relative to the workspace (default: the workspace)"}
  },
  "required": ["command"],
  "additionalProperties": false
}`

// New returns the run_command tool over the workspace wss gives each call.
func New(wss workspace.Resolver, opts Options) tools.Tool {
	r := &runner{opts: opts.withDefaults(), env: environ(opts.Env)}
	t := tools.Tool{
		Name:        "run_command",
		Title:       "Run command",
		Annotations: tools.Annotations{Destructive: true, OpenWorld: true},
		Handler: workspace.Handler(wss, func(ctx context.Context, call *tools.Call, ws *workspace.Workspace) (*tools.Result, error) {
			var args Args
			if err := json.Unmarshal(call.Arguments, &args); err != nil {
				return nil, fmt.Errorf("decoding arguments: %w", err)
			}
			return r.in(ws).run(ctx, call, args)
		}),
	}
	const common = " in the workspace (or the folder cwd names) and returns its exit code and output (stdout and stderr together; " +
		"the middle of long output is left out). Output streams while it runs. A non-zero exit code is an error. Stdin is empty."
	if r.opts.Shell {
		t.Description = "Runs a shell command line with /bin/sh -c" + common
		t.InputSchema = json.RawMessage(shellSchema)
	} else {
		t.Description = "Runs a program with arguments (argv; no shell, so no pipes, globs or variables)" + common
		t.InputSchema = json.RawMessage(argvSchema)
	}
	return t
}

// environ returns the environment commands get: the allowed names that are
// set in the server's environment, now.
func environ(names []string) []string {
	env := []string{}
	hasPath := false
	for _, name := range names {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
			hasPath = hasPath || name == "PATH"
		}
	}
	if !hasPath {
		env = append(env, "PATH="+DefaultPath)
	}
	return env
}

type runner struct {
	ws   *workspace.Workspace // the call's; see in
	opts Options
	env  []string
}

// in returns a copy of r for one call, working in that call's workspace.
func (r *runner) in(ws *workspace.Workspace) *runner {
	c := *r
	c.ws = ws
	return &c
}

func (r *runner) run(ctx context.Context, call *tools.Call, args Args) (*tools.Result, error) {
	argv := args.Argv
	if r.opts.Shell {
		argv = []string{"/bin/sh", "-c", args.Command}
	}
	if len(argv) == 0 || argv[0] == "" {
		return tools.Errorf("argv is empty: give the program to run and its arguments"), nil
	}
	rel, dir, err := r.dir(args.Cwd)
	if errors.Is(err, syscall.ENOTDIR) {
		return tools.Errorf("cwd %s is not a folder", args.Cwd), nil
	}
	if err != nil {
		return workspace.Problem(args.Cwd, err), nil
	}
	prog, err := lookPath(argv[0], r.env, dir)
	if err != nil {
		return tools.Errorf("%v", err), nil
	}
	if name, ok := r.allowed(args); !ok {
		if err := call.RequestApproval(ctx, fmt.Sprintf("%s is not among the programs run_command runs without asking", strconv.Quote(name))); err != nil {
			return nil, err
		}
	}

	// A command needs room; what it takes of the workspace is measured
	// again by the next write that needs to know.
	if err := r.ws.CheckFree(0); err != nil {
		return tools.Errorf("cannot start the command: %v", err), nil
	}
	defer r.ws.Changed()
	if r.opts.Sandbox != nil {
		return r.runSandboxed(ctx, call, argv, prog, rel, dir)
	}

	pipe, err := newPump(call, r.opts)
	if err != nil {
		return notStarted("cannot start the command", err)
	}
	cmd := exec.CommandContext(ctx, prog, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir, cmd.Env = dir, r.env
	// Being an *os.File, Wait does not wait for the pipe to drain.
	cmd.Stdout, cmd.Stderr = pipe.w, pipe.w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var termAt atomic.Int64 // when SIGTERM went to the group, as monotime.Now
	cmd.Cancel = func() error {
		termAt.Store(monotime.Now())
		return signalGroup(cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = r.opts.KillGrace
	start := time.Now()
	err = cmd.Start()
	pipe.started(err)
	if err != nil {
		return notStarted("cannot start "+argv[0], err)
	}
	return await(ctx, func() (*tools.Result, error) {
		waitErr := cmd.Wait()
		r.endGroup(cmd.Process.Pid, termAt.Load(), pipe)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d := Details{Argv: argv, Cwd: filepath.ToSlash(rel), ExitCode: cmd.ProcessState.ExitCode(), DurationMS: time.Since(start).Milliseconds(), Sandbox: &sandbox.Restrictions{Mode: sandbox.Off}}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			d.Signal = ws.Signal().String()
		}
		return finish(d, pipe.out, waitErr != nil && !errors.As(waitErr, new(*exec.ExitError)), "")
	})
}

// await returns what end returns, or ctx's error as soon as ctx ends. end
// waits for the command, ends what it left running and drains its output;
// after a cancellation it goes on in the background, since that can take the
// whole kill grace (a command that ignores SIGTERM) or, on a loaded machine,
// a scheduling round of each process involved, while a built-in tool must
// return within the service's abandon grace (as little as 100 ms). The
// command has its SIGTERM by then (exec's Cancel, or the supervisor's) and
// end still kills and reaps every process, so none survives it.
func await(ctx context.Context, end func() (*tools.Result, error)) (*tools.Result, error) {
	type ended struct {
		res *tools.Result
		err error
	}
	done := make(chan ended, 1)
	go func() {
		res, err := end()
		done <- ended{res, err}
	}()
	select {
	case e := <-done:
		return e.res, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// finish builds the result from d and the command's output; note, if not
// empty, is a line saying what the sandbox did to the command.
func finish(d Details, out *output, failed bool, note string) (*tools.Result, error) {
	text, total, truncated := out.result()
	d.OutputBytes, d.Truncated = total, truncated

	var b strings.Builder
	switch {
	case d.Signal != "":
		fmt.Fprintf(&b, "killed by signal: %s\n", d.Signal)
	default:
		fmt.Fprintf(&b, "exit code %d\n", d.ExitCode)
	}
	if note != "" {
		b.WriteString(note + "\n")
	}
	if text == "" {
		b.WriteString("(no output)\n")
	} else {
		b.WriteString(text)
	}
	res := tools.Text(b.String())
	res.IsError = d.ExitCode != 0 || failed
	var err error
	res.Details, err = json.Marshal(d)
	return res, err
}

// dir resolves the model's cwd to a folder inside the workspace: relative to
// the workspace (for Details) and absolute (for the command). os.Root checks
// the path, symlinks included, and SameFile that the absolute path names the
// folder os.Root found.
func (r *runner) dir(cwd string) (rel, abs string, err error) {
	rel, err = r.ws.Rel(cwd)
	if err != nil {
		return "", "", err
	}
	// O_DIRECTORY: a named pipe named as the folder is refused at once,
	// where a plain open would wait for a writer.
	f, err := r.ws.Root().OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	inside, err := f.Stat()
	if err != nil {
		return "", "", err
	}
	if !inside.IsDir() {
		return "", "", &os.PathError{Op: "chdir", Path: cwd, Err: syscall.ENOTDIR}
	}
	abs = filepath.Join(r.ws.Dir(), rel)
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	if at, err := os.Stat(abs); err != nil || !os.SameFile(at, inside) {
		return "", "", fmt.Errorf("%w: %s changed while it was being resolved", workspace.ErrEscapes, cwd)
	}
	return rel, abs, nil
}

// notStarted is the result of a command that could not be started: what
// went wrong after what, or, when the server is short of descriptors or
// memory (workspace.Exhausted), that alone, as something to retry rather
// than the errno of whichever step met it first (pipe2, the supervisor's
// fork, the Landlock library's "BUG(go-landlock): This should not have
// happened"), or an error with no result at all.
func notStarted(what string, err error) (*tools.Result, error) {
	if workspace.Exhausted(err) {
		return tools.Errorf("cannot start the command now: %s; try again shortly", workspace.Shortage(err)), nil
	}
	return tools.Errorf("%s: %v", what, err), nil
}

// endGroup ends what is left of the command's process group once its leader
// has exited: background children get SIGTERM, then SIGKILL when they have
// closed the output pipe or the grace since the first SIGTERM (termAt, if
// cancellation sent one) has passed. Then the output is drained; the pipe is
// closed if something outside the group (a child that called setsid) still
// holds it.
//
// The group's ID stays the leader's PID while any member lives; once none
// does, the signals find no group (ESRCH). Only a new process that both got
// the leader's reaped PID and made it a group in between could receive them.
func (r *runner) endGroup(pgid int, termAt int64, pipe *pump) {
	wait := r.opts.KillGrace
	if termAt != 0 {
		wait -= monotime.Since(termAt)
	}
	if signalGroup(pgid, syscall.SIGTERM) == nil {
		grace := time.NewTimer(max(wait, 0))
		select {
		case <-pipe.read:
		case <-grace.C:
		}
		grace.Stop()
		_ = signalGroup(pgid, syscall.SIGKILL)
	}
	pipe.drain(drainWait)
}

// signalGroup sends sig to the process group pgid; a group already gone is
// not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// lookPath finds the program name as the command's own PATH would, rather
// than the server's; a name with a slash is taken relative to dir.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	var path string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue // a relative PATH entry would depend on cwd
		}
		p := filepath.Join(d, name)
		if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %q not found in PATH %s", name, path)
}

// allowed reports whether the command args names may run without asking,
// with the program's name as matched; see Options.Allow.
func (r *runner) allowed(args Args) (string, bool) {
	name := ""
	if r.opts.Shell {
		if f := strings.Fields(args.Command); len(f) > 0 {
			name = f[0]
		}
	} else if len(args.Argv) > 0 {
		name = args.Argv[0]
	}
	name = filepath.Base(name)
	if len(r.opts.Allow) == 0 {
		return name, true
	}
	for _, pat := range r.opts.Allow {
		if ok, _ := path.Match(pat, name); ok {
			return name, true
		}
	}
	return name, false
}
