package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox/internal/supervisor"
)

// probe says what this kernel lets cfg enforce.
func probe(cfg Config) Restrictions {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		abi = 0
	}
	sc := seccomp.Supported()
	// Landlock leaves reads of the server's /proc files (environ, fd links)
	// to ptrace's checks, which let the same user through unless the
	// server is not dumpable.
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
		Mediated:    sc && canMediate(),
		Scoped:      abi >= 6,
		NoNewPrivs:  true,
		Identity:    IdentityServer,
		SysVIPC:     cfg.SysVIPC,
		Limits: Limits{
			CPUSeconds:        cfg.CPUSeconds,
			MemoryBytes:       cfg.MemoryBytes,
			MaxOpenFiles:      cfg.MaxOpenFiles,
			MaxFileBytes:      cfg.MaxFileBytes,
			MaxProcesses:      cfg.MaxProcesses,
			UIDProcesses:      uidProcesses(),
			MaxWorkspaceBytes: cfg.MaxWorkspaceBytes,
			MaxWorkspaceFiles: cfg.MaxWorkspaceFiles,
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
	} else if !r.Mediated {
		r.Missing = append(r.Missing, "metadata changes, Unix socket paths and locks outside the workspace (needs seccomp user notification, pidfd_getfd and openat2: Linux 5.6)")
	}
	return r
}

// uidProcesses is the commands' RLIMIT_NPROC: the server's own less
// ServerThreads, so that the commands of every call together cannot take
// the server's room for its threads; 0 (the server's, unlimited) when the
// server has no limit. Half the server's when that is small.
func uidProcesses() uint64 {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &l) != nil || l.Cur == unix.RLIM_INFINITY {
		return 0
	}
	if l.Cur <= 2*ServerThreads {
		return max(l.Cur/2, 1)
	}
	return l.Cur - ServerThreads
}

// canMediate reports whether the kernel has what the supervisor needs to
// perform mediated system calls: seccomp user notification (its sizes
// query, 5.0), pidfd_getfd and openat2 (5.6).
func canMediate() bool {
	var sizes [3]uint16
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&sizes))); e != 0 {
		return false
	}
	if _, _, e := unix.Syscall(unix.SYS_PIDFD_GETFD, ^uintptr(0), 0, 0); e == unix.ENOSYS {
		return false
	}
	_, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
	return err == nil || err != unix.ENOSYS
}

// cannotSwitchUser says why this server may not give sessions uids of
// their own ("" when it may): it must be root, or hold the capabilities to
// take a uid (SETUID, SETGID), give it a folder (CHOWN) and keep managing
// that folder and its processes (DAC_OVERRIDE, FOWNER, KILL).
func cannotSwitchUser() string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return "reading capabilities: " + err.Error()
	}
	var missing []string
	for _, c := range []struct {
		n    int
		name string
	}{{unix.CAP_SETUID, "SETUID"}, {unix.CAP_SETGID, "SETGID"}, {unix.CAP_CHOWN, "CHOWN"}, {unix.CAP_DAC_OVERRIDE, "DAC_OVERRIDE"}, {unix.CAP_FOWNER, "FOWNER"}, {unix.CAP_KILL, "KILL"}} {
		if data[c.n/32].Effective&(1<<(c.n%32)) == 0 {
			missing = append(missing, "CAP_"+c.name)
		}
	}
	if len(missing) > 0 {
		return "the server lacks " + strings.Join(missing, ", ")
	}
	return ""
}

// Run is one command to run in the sandbox.
type Run struct {
	Path     string   // the program, resolved
	Argv     []string // argv[0] and the arguments
	Dir      string   // the working folder; must be inside Writable
	Env      []string
	Writable []string      // the folders the command may write: the workspace, its TMPDIR (symlinks resolved)
	Output   *os.File      // stdout and stderr
	Grace    time.Duration // how long the command has after SIGTERM before SIGKILL
	// User is the session's uid and gid (from the range of UIDs), nil for
	// the server's.
	User *User
	// MinFreeBytes is the room the file systems of Writable must keep:
	// the supervisor's watchdog ends a command that leaves less (0: none).
	MinFreeBytes uint64
}

// User is the uid and gid a session's commands run under.
type User = supervisor.User

// Process is a supervised command.
type Process struct {
	sup    *supervisorProc
	uid    int           // the command's uid, -1 for the server's
	cgroup string        // the call's cgroup, removed after it
	ended  chan struct{} // closed when the supervisor has exited
	stop   func() bool   // stops ending it on the call's context
}

// Start starts run under a supervisor: a warm one of the same uid, or a
// spare, when there is one (see pool), else a new one. Cancelling ctx makes the supervisor end the command (SIGTERM,
// then SIGKILL after run.Grace) and every process it started; the
// supervisor itself gets SIGKILL if it has not exited a second after that.
func (s *Sandbox) Start(ctx context.Context, run Run) (*Process, error) {
	if run.User != nil && s.uids == nil {
		return nil, errors.New("the sandbox gives commands no uid of their own (no sandbox.uid_range)")
	}
	sp := supervisor.Spec{Path: run.Path, Argv: run.Argv, Dir: run.Dir, Env: run.Env, GraceMillis: run.Grace.Milliseconds(), User: run.User, Roots: run.Writable, MinFreeBytes: run.MinFreeBytes}
	if s.cgroups != nil {
		dir, err := s.cgroups.call()
		if err != nil {
			return nil, fmt.Errorf("making the call's cgroup: %w", err)
		}
		sp.Cgroup = dir
	}
	p, err := s.start(sp, run)
	if err != nil {
		s.cgroups.remove(sp.Cgroup)
		return nil, err
	}
	p.stop = context.AfterFunc(ctx, func() {
		_ = p.sup.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.ended:
		case <-time.After(run.Grace + time.Second):
			_ = p.sup.cmd.Process.Kill()
		}
	})
	return p, nil
}

// start hands sp to a supervisor.
func (s *Sandbox) start(sp supervisor.Spec, run Run) (*Process, error) {
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
	uid := -1
	if run.User != nil {
		uid = run.User.UID
	}
	sup := s.pool.take(uid)
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
	return &Process{sup: sup, uid: uid, cgroup: sp.Cgroup, ended: make(chan struct{})}, nil
}

// Wait returns how the command ended. The supervisor reports the command's
// tree as it changes and, once every process the command started is
// reaped, how it ended; then it waits for another command, and goes back
// to the pool, or it exits, which takes a while and leaves nothing of the
// command's behind, and is waited for in the background.
// Should the supervisor die before its last report, Wait ends what it last
// reported of the tree (and the call's cgroup) itself.
func (p *Process) Wait() (Exit, error) {
	b := reportBuffers.Get().(*[]byte)
	defer reportBuffers.Put(b)
	return p.wait(*b)
}

// reportBuffers hold one report each: of supervisor.MaxTree processes at
// most.
var reportBuffers = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

func (p *Process) wait(b []byte) (Exit, error) {
	var tree []supervisor.Proc
	for {
		var n int
		var rerr error
		for {
			// A report, or the end of the connection if the supervisor died.
			if n, rerr = unix.Read(p.sup.conn, b); rerr != unix.EINTR {
				break
			}
		}
		if rerr != nil || n < 0 {
			n = 0
		}
		r, err := supervisor.DecodeReport(b[:n])
		switch {
		case err == nil && r.Exit != nil:
			e := *r.Exit
			// Not ending it on the call's context now, the supervisor may
			// run another command; but not when the context has sent it a
			// signal, which could reach it during that one.
			if p.stop() && e.Again {
				e.Again = false
				p.sup.sandbox.cgroups.remove(p.cgroup)
				p.sup.uid = p.uid
				p.sup.sandbox.pool.put(p.sup)
				return e, nil
			}
			e.Again = false
			unix.Close(p.sup.conn)
			go p.reap()
			return e, nil
		case err == nil:
			tree = r.Tree
			continue
		}
		unix.Close(p.sup.conn)
		if supervisor.IsNoStatus(err) {
			endTree(tree, p.cgroup)
		}
		werr := p.reap()
		if !errors.As(werr, new(*exec.ExitError)) && werr != nil {
			return Exit{}, werr
		}
		return Exit{}, errors.Join(err, werr)
	}
}

// endTree kills, as a backstop, what a supervisor that died without its
// last report had reported of its command's tree: each process still the
// one reported (its start time unchanged) and everything below it, until
// none is left; and the call's cgroup.
func endTree(tree []supervisor.Proc, cgroup string) {
	if cgroup != "" {
		_ = os.WriteFile(cgroup+"/cgroup.kill", []byte("1\n"), 0)
	}
	live := map[int]bool{}
	for _, pr := range tree {
		if supervisor.StartTime(pr.PID) == pr.Start {
			live[pr.PID] = true
		}
	}
	for range 50 {
		if len(live) == 0 {
			return
		}
		for pid := range live {
			for _, c := range children(pid) {
				live[c] = true
			}
			if unix.Kill(pid, syscall.SIGKILL) == unix.ESRCH {
				delete(live, pid)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// children lists pid's children, from its threads' children files.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, t := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// reap waits for the supervisor's exit.
func (p *Process) reap() error {
	err := p.sup.cmd.Wait()
	close(p.ended)
	p.stop()
	p.sup.sandbox.cgroups.remove(p.cgroup)
	return err
}

// PID returns the supervisor's process ID.
func (p *Process) PID() int { return p.sup.cmd.Process.Pid }

// supervisorProc is a started supervisor and the server's end of its
// connection.
type supervisorProc struct {
	sandbox *Sandbox
	cmd     *exec.Cmd
	conn    int // SOCK_SEQPACKET, close-on-exec
	uid     int // the uid it ran its last command as (-1: the server's); a spare has run none
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
	// Only the setup: the command's environment travels in its Spec. Two
	// Ps: one for the supervisor's work, while its receiver of seccomp
	// notifications waits in a system call holding the other (see
	// supervisor's mediator.serve); more would only cost at start and idle.
	cmd.Env = []string{supervisor.SetupEnv + "=" + string(s.setup), "GOMAXPROCS=2"}
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
	return &supervisorProc{sandbox: s, cmd: cmd, conn: pair[0]}, nil
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
