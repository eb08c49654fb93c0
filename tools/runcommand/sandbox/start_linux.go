package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
	sup   *supervisorProc
	ended chan struct{} // closed when the supervisor has exited
	stop  func() bool   // stops ending it on the call's context
}

// Start starts run under a supervisor: a spare one when there is one, else
// a new one. Cancelling ctx makes the supervisor end the command (SIGTERM,
// then SIGKILL after run.Grace) and every process it started; the
// supervisor itself gets SIGKILL if it has not exited a second after that.
func (s *Sandbox) Start(ctx context.Context, run Run) (*Process, error) {
	sp := supervisor.Spec{Path: run.Path, Argv: run.Argv, Dir: run.Dir, Env: run.Env, GraceMillis: run.Grace.Milliseconds()}
	fd, flags, err := s.ruleset(run.Writable)
	if err != nil {
		return nil, fmt.Errorf("making the Landlock ruleset: %w", err)
	}
	fds := []int{int(run.Output.Fd())}
	if fd >= 0 {
		defer unix.Close(fd) // the supervisor has its copy once sent
		fds = append(fds, fd)
		sp.Landlock, sp.LandlockFlags = true, flags
	}
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, err
	}
	if len(b) > supervisor.MaxSpec {
		return nil, fmt.Errorf("the command and its environment take %d bytes; the sandbox takes at most %d", len(b), supervisor.MaxSpec)
	}
	sup := s.pool.take()
	defer s.pool.refill()
	if sup == nil || sup.send(b, fds) != nil {
		// No spare, or it died waiting (killed from outside): a new one.
		if sup != nil {
			sup.discard()
		}
		if sup, err = s.spawn(); err != nil {
			return nil, err
		}
		if err := sup.send(b, fds); err != nil {
			sup.discard()
			return nil, fmt.Errorf("handing the command to the sandbox supervisor: %w", err)
		}
	}
	runtime.KeepAlive(run.Output)
	p := &Process{sup: sup, ended: make(chan struct{})}
	p.stop = context.AfterFunc(ctx, func() {
		_ = sup.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.ended:
		case <-time.After(run.Grace + time.Second):
			_ = sup.cmd.Process.Kill()
		}
	})
	return p, nil
}

// Wait returns how the command ended. The supervisor reports it once every
// process the command started is gone, then exits; that exit, which takes a
// while and leaves nothing of the command's behind, is waited for in the
// background.
func (p *Process) Wait() (Exit, error) {
	b := make([]byte, 4096)
	var n int
	var rerr error
	for {
		// The report, or the end of the connection if the supervisor died.
		if n, rerr = unix.Read(p.sup.conn, b); rerr != unix.EINTR {
			break
		}
	}
	unix.Close(p.sup.conn)
	if rerr != nil || n < 0 {
		n = 0
	}
	e, err := supervisor.DecodeExit(bytes.TrimSpace(b[:n]))
	if err == nil {
		p.stop()
		go p.reap()
		return e, nil
	}
	werr := p.reap()
	if !errors.As(werr, new(*exec.ExitError)) && werr != nil {
		return e, werr
	}
	return e, errors.Join(err, werr)
}

// reap waits for the supervisor's exit.
func (p *Process) reap() error {
	err := p.sup.cmd.Wait()
	close(p.ended)
	p.stop()
	return err
}

// PID returns the supervisor's process ID.
func (p *Process) PID() int { return p.sup.cmd.Process.Pid }

// supervisorProc is a started supervisor and the server's end of its
// connection.
type supervisorProc struct {
	cmd  *exec.Cmd
	conn int // SOCK_SEQPACKET, close-on-exec
}

// spawn starts a supervisor, which prepares itself and waits for its Spec.
func (s *Sandbox) spawn() (*supervisorProc, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: connecting to its supervisor: %w", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "sandbox-supervisor")
	defer theirs.Close() // the supervisor has its copy once started
	cmd := exec.Command(s.exe, Command)
	// Only the setup: the command's environment travels in its Spec. One P:
	// the supervisor has one thing to do at a time, and its Go runtime
	// starts (and idles) cheaper without more.
	cmd.Env = []string{supervisor.SetupEnv + "=" + string(s.setup), "GOMAXPROCS=1"}
	cmd.ExtraFiles = []*os.File{theirs} // supervisor.ConnFD
	// A process group of its own, which commands cannot join (seccomp
	// refuses setpgid into an existing group). Not a session of its own: a
	// session leader costs more per command, for nothing the sandbox needs
	// (Landlock keeps commands off /dev/tty).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("cannot start the sandbox supervisor: %w", err)
	}
	return &supervisorProc{cmd: cmd, conn: pair[0]}, nil
}

// send hands the supervisor its Spec and descriptors.
func (p *supervisorProc) send(spec []byte, fds []int) error {
	for {
		err := unix.Sendmsg(p.conn, spec, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
		if err != unix.EINTR {
			return err
		}
	}
}

// discard ends a supervisor that has no command (closing its connection is
// enough for a live one) and reaps it.
func (p *supervisorProc) discard() {
	unix.Close(p.conn)
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}
