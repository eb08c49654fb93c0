package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox/supervisor"
)

// probe says what this kernel lets cfg enforce.
func probe(cfg Config) Restrictions {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		abi = 0
	}
	sc := seccomp.Supported()
	// Commands run as the server's user; Landlock leaves reads of the
	// server's /proc files (environ, fd links) to ptrace's checks, which let
	// the same user through unless the server is not dumpable.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	deny := cfg.Network == NetworkDeny
	r := Restrictions{
		Mode:        cfg.Mode,
		LandlockABI: abi,
		Files:       abi >= 1,
		Network:     cfg.Network,
		TCP:         deny && abi >= 4,
		Sockets:     deny && sc,
		Syscalls:    sc,
		Scoped:      abi >= 6,
		NoNewPrivs:  true,
		Limits: Limits{
			CPUSeconds:   cfg.CPUSeconds,
			MemoryBytes:  cfg.MemoryBytes,
			MaxOpenFiles: cfg.MaxOpenFiles,
			MaxFileBytes: cfg.MaxFileBytes,
			MaxProcesses: cfg.MaxProcesses,
		},
	}
	if !r.Files {
		r.Missing = append(r.Missing, "files (Landlock is not enabled in this kernel)")
	}
	if deny && !r.TCP {
		r.Missing = append(r.Missing, "TCP connect and bind (needs Landlock ABI 4)")
	}
	if !r.Scoped {
		r.Missing = append(r.Missing, "signal and abstract socket scoping (needs Landlock ABI 6)")
	}
	if !sc {
		r.Missing = append(r.Missing, "system call filter and non-Unix sockets (seccomp is not available)")
	}
	return r
}

// Run is one command to run in the sandbox.
type Run struct {
	Path     string   // the program, resolved
	Argv     []string // argv[0] and the arguments
	Dir      string   // the working folder; must be inside Writable
	Env      []string
	Writable []string      // the folders the command may write: the workspace, its TMPDIR
	Output   *os.File      // stdout and stderr
	Grace    time.Duration // how long the command has after SIGTERM before SIGKILL
}

// Process is a supervised command.
type Process struct {
	cmd    *exec.Cmd
	status *os.File
}

// Start starts run under a supervisor. Cancelling ctx makes the supervisor
// end the command (SIGTERM, then SIGKILL after run.Grace) and every process
// it started; the supervisor itself gets SIGKILL if it has not exited a
// second after that.
func (s *Sandbox) Start(ctx context.Context, run Run) (*Process, error) {
	sp := supervisor.Spec{
		Path: run.Path, Argv: run.Argv, Dir: run.Dir, Env: run.Env, Limits: s.r.Limits,
		Filter: s.filter, Parent: os.Getpid(), GraceMillis: run.Grace.Milliseconds(),
	}
	fd, flags, err := s.ruleset(run.Writable)
	if err != nil {
		return nil, fmt.Errorf("making the Landlock ruleset: %w", err)
	}
	var rules *os.File
	if fd >= 0 {
		rules = os.NewFile(uintptr(fd), "landlock-ruleset")
		defer rules.Close() // the supervisor has its copy once started
		sp.Landlock, sp.LandlockFlags = true, flags
	}
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, err
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer sw.Close()
	cmd := exec.CommandContext(ctx, s.exe, Command)
	// Only the spec: the command's environment travels inside it.
	cmd.Env = []string{supervisor.SpecEnv + "=" + string(b)}
	cmd.Stdout, cmd.Stderr = run.Output, run.Output
	cmd.ExtraFiles = []*os.File{sw, rules} // supervisor.StatusFD, supervisor.LandlockFD
	// A process group of its own, which commands cannot join (seccomp
	// refuses setpgid into an existing group). Not a session of its own: a
	// session leader costs more per command, for nothing the sandbox needs
	// (Landlock keeps commands off /dev/tty).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = run.Grace + time.Second
	if err := cmd.Start(); err != nil {
		sr.Close()
		return nil, err
	}
	return &Process{cmd: cmd, status: sr}, nil
}

// Wait waits for the supervisor and returns how the command ended.
func (p *Process) Wait() (Exit, error) {
	defer p.status.Close()
	werr := p.cmd.Wait()
	// The supervisor is gone, so the pipe's only writer is closed: this
	// cannot block.
	b, _ := io.ReadAll(p.status)
	e, err := supervisor.DecodeExit(bytes.TrimSpace(b))
	if err != nil && werr != nil && !errors.As(werr, new(*exec.ExitError)) {
		return e, werr
	}
	if err != nil && werr != nil {
		return e, errors.Join(err, werr)
	}
	return e, err
}

// PID returns the supervisor's process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }
