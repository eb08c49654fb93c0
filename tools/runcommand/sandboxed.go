package runcommand

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace/usage"
)

// runSandboxed runs prog under the sandbox's supervisor, writable only in
// dir's workspace and a TMPDIR of its own that is removed afterwards.
func (r *runner) runSandboxed(ctx context.Context, call *tools.Call, argv []string, prog, rel, dir string) (*tools.Result, error) {
	sb := r.opts.Sandbox
	tmp, user, err := r.callTemp()
	if err != nil {
		return notStarted("cannot start the command", err)
	}
	minFree := r.ws.Limits().MinFreeBytes
	if free, err := usage.Free(tmp); err == nil && free < minFree {
		removeAll(tmp)
		return tools.Errorf("cannot start the command: the disk holding its $TMPDIR has %d bytes left, and the server keeps %d of it free (workspace_min_free_bytes); try again once there is room", free, minFree), nil
	}
	pipe, err := newPump(call, r.opts)
	if err != nil {
		removeAll(tmp)
		return notStarted("cannot start the command", err)
	}
	start := time.Now()
	p, err := sb.Start(ctx, sandbox.Run{
		Path: prog, Argv: argv, Dir: dir,
		Env:      append(slices.Clone(r.env), "TMPDIR="+tmp),
		Writable: []string{r.ws.Dir(), tmp},
		Output:   pipe.w, Grace: r.opts.KillGrace,
		User: user, MinFreeBytes: minFree,
	})
	pipe.started(err) // the supervisor has its copy
	if err != nil {
		removeAll(tmp)
		return notStarted("cannot start the command", err)
	}
	return await(ctx, func() (*tools.Result, error) {
		defer removeAll(tmp)
		defer r.ws.Changed() // after its last process, which the supervisor has ended
		exit, waitErr := p.Wait()
		// The supervisor has ended every process that held the pipe, unless it
		// was itself killed; then do not wait for them.
		pipe.drain(drainWait)

		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if waitErr != nil {
			return nil, waitErr
		}
		if exit.Error != "" {
			// The supervisor could not start the command: under a small
			// max_processes that is the limit, which the model cannot tell.
			if note := sandboxNote(sb.Config(), sb.Restrictions().Limits.UIDProcesses, minFree, sandbox.Exit{Code: -1}, exit.Error); note != "" {
				return tools.Errorf("%s\n%s", exit.Error, note), nil
			}
			return tools.Errorf("%s", exit.Error), nil
		}
		rs := sb.Restrictions()
		d := Details{Argv: argv, Cwd: filepath.ToSlash(rel), ExitCode: exit.Code, DurationMS: time.Since(start).Milliseconds(), Sandbox: &rs, Limit: exit.Limit}
		if exit.Signal != 0 {
			d.Signal = syscall.Signal(exit.Signal).String()
		}
		text, _, _ := pipe.out.result()
		return finish(d, pipe.out, false, sandboxNote(sb.Config(), sb.Restrictions().Limits.UIDProcesses, minFree, exit, text))
	})
}

// callTemp makes the call's own TMPDIR (symlinks resolved: it is one of the
// roots the supervisor checks paths against) and, when the workspace has an
// owner of its own, gives it to that owner, whose uid the command gets.
func (r *runner) callTemp() (string, *sandbox.User, error) {
	parent, err := callsDir()
	if err != nil {
		return "", nil, fmt.Errorf("making the server's folder for calls' TMPDIRs: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "call-")
	if err != nil {
		return "", nil, fmt.Errorf("making the call's TMPDIR: %w", err)
	}
	if real, err := filepath.EvalSymlinks(tmp); err == nil {
		tmp = real
	}
	o := r.ws.Owner()
	if o == nil {
		return tmp, nil, nil
	}
	if err := os.Chown(tmp, o.UID, o.GID); err != nil {
		removeAll(tmp)
		return "", nil, fmt.Errorf("giving the call's TMPDIR to the session's uid: %w", err)
	}
	return tmp, &sandbox.User{UID: o.UID, GID: o.GID}, nil
}

// sandboxNote says what the sandbox did to a command that failed: the limit
// that ended it, or, when its output reads like a denial, what the sandbox
// allows, so the model does not retry blindly. uidProcesses is the
// commands' RLIMIT_NPROC (0: none), minFree the room the server keeps on
// the disk (workspace_min_free_bytes).
func sandboxNote(cfg sandbox.Config, uidProcesses, minFree uint64, exit sandbox.Exit, text string) string {
	detail := ""
	if exit.Detail != "" {
		detail = " (" + exit.Detail + ")"
	}
	switch exit.Limit {
	case "cpu_seconds":
		return fmt.Sprintf("the sandbox ended the command: it used its CPU time limit (sandbox.cpu_seconds: %d)%s", cfg.CPUSeconds, detail)
	case "outside_lock":
		return "the sandbox ended the command: it locked a file outside the workspace and $TMPDIR" + detail
	case "max_file_bytes":
		return fmt.Sprintf("the sandbox ended the command: it wrote a file past the size limit (sandbox.max_file_bytes: %d bytes)", cfg.MaxFileBytes)
	case "memory_bytes":
		return fmt.Sprintf("the sandbox ended the command: its processes together used more memory than the limit (sandbox.memory_bytes: %d bytes)", cfg.MemoryBytes)
	case "max_processes":
		return fmt.Sprintf("the sandbox ended the command: it ran more processes and threads at once than the limit (sandbox.max_processes: %d)", cfg.MaxProcesses)
	case "max_workspace_bytes":
		return fmt.Sprintf("the sandbox ended the command: the workspace and $TMPDIR grew past the limit (sandbox.max_workspace_bytes: %d bytes); remove files before trying again", cfg.MaxWorkspaceBytes)
	case "workspace_min_free_bytes":
		return fmt.Sprintf("the sandbox ended the command: it left the disk short of the room the server keeps free for everything else (workspace_min_free_bytes: %d bytes)%s; remove files you no longer need before trying again", minFree, detail)
	case "max_workspace_files":
		return fmt.Sprintf("the sandbox ended the command: the workspace and $TMPDIR hold more files and folders than the limit (sandbox.max_workspace_files: %d)%s; remove some before trying again", cfg.MaxWorkspaceFiles, detail)
	}
	if exit.Code == 0 && exit.Signal == 0 {
		return ""
	}
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(text, w) {
				return true
			}
		}
		return false
	}
	denied := has("Permission denied", "Operation not permitted", "PermissionError", "EACCES", "EPERM")
	var notes []string
	if cfg.Network == sandbox.NetworkDeny && denied && has("connect", "socket", "Socket", "network", "Network", "bind", "resolve", "curl", "wget", "http") {
		notes = append(notes, "the sandbox denies network access (sandbox.network: deny)")
	}
	if denied && len(notes) == 0 {
		notes = append(notes, "the sandbox lets commands write, change file modes, owners and times, connect to Unix sockets and lock files only in the workspace and $TMPDIR, read only those and the system's read-only folders, and not signal, trace, limit or reschedule other processes")
	}
	if cfg.MemoryBytes > 0 && has("Cannot allocate memory", "MemoryError", "out of memory", "bad_alloc", "ENOMEM") {
		notes = append(notes, fmt.Sprintf("the sandbox limits each process's memory (sandbox.memory_bytes: %d)", cfg.MemoryBytes))
	}
	// A child that wrote past max_file_bytes dies of SIGXFSZ (the shell
	// says "File size limit exceeded") or gets EFBIG ("File too large"),
	// while the command itself may end on its own exit code.
	if has("File too large", "File size limit exceeded", "EFBIG") {
		notes = append(notes, fmt.Sprintf("the sandbox limits the size of files a process writes (sandbox.max_file_bytes: %d bytes)", cfg.MaxFileBytes))
	}
	// Likewise a child past cpu_seconds dies of SIGXCPU, which its shell
	// reports as "CPU time limit exceeded": the command's own exit code
	// names no limit.
	if has("CPU time limit exceeded") {
		notes = append(notes, fmt.Sprintf("the sandbox limits the CPU time of each process (sandbox.cpu_seconds: %d)", cfg.CPUSeconds))
	}
	if has("Resource temporarily unavailable", "resource temporarily unavailable", "Cannot fork", "can't fork", "EAGAIN") {
		note := fmt.Sprintf("the sandbox limits processes (sandbox.max_processes: %d processes and threads per command, all it started counted", cfg.MaxProcesses)
		if uidProcesses != 0 {
			// Under a small RLIMIT_NPROC this is the limit met, not
			// max_processes, and the other calls' commands count too.
			note += fmt.Sprintf("; and %d for every command running under this uid together, the server's RLIMIT_NPROC less room for its own threads", uidProcesses)
		}
		notes = append(notes, note+")")
	}
	if has("Too many open files") {
		notes = append(notes, fmt.Sprintf("the sandbox limits open files (sandbox.max_open_files: %d)", cfg.MaxOpenFiles))
	}
	return strings.Join(notes, "\n")
}
