package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Main runs the supervisor: it prepares what needs no command (the
// parent-death signal, the subreaper, its signal handling and threads, no
// capabilities or new privileges), waits for its Spec, restricts itself
// further, runs the command, ends every process the command started, sends
// how the command ended back on ConnFD and exits. It does not return.
func Main() {
	// No descriptor but stdin, stdout and stderr may reach the command: not
	// the connection, not whatever the server inherited without
	// close-on-exec.
	closeOnExecFrom(ConnFD)
	// Capabilities, no-new-privileges, Landlock and seccomp are set on this
	// thread, which forks the command: locked, it stays the one.
	runtime.LockOSThread()
	var setup Setup
	err := json.Unmarshal([]byte(os.Getenv(SetupEnv)), &setup)
	os.Unsetenv(SetupEnv)
	var (
		warm *sync.WaitGroup
		sigs chan os.Signal
	)
	if err != nil {
		err = fmt.Errorf("sandbox supervisor: reading its setup: %v", err)
	} else {
		warm, sigs, err = prepare(setup)
	}
	sp, err2 := receive()
	if err2 == io.EOF {
		unix.Exit(0) // a spare the server no longer needs, or the server is gone
	}
	var e Exit
	switch {
	case err2 != nil:
		e = Exit{Code: -1, Error: fmt.Sprintf("sandbox supervisor: %v", err2)}
	case err != nil:
		e = Exit{Code: -1, Error: err.Error()}
	default:
		warm.Wait()
		e = supervise(setup, sp, sigs)
	}
	// Nothing the command started is left: let go of its output, so that
	// the server reads to its end without waiting for this process's exit,
	// which (the Go runtime's threads and memory) takes a while.
	if devnull, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Dup3(devnull, 1, 0)
		_ = unix.Dup3(devnull, 2, 0)
	}
	b, _ := json.Marshal(e)
	_, _ = unix.Write(ConnFD, b)
	// Not os.Exit: under the race detector it waits a second for threads
	// that have nothing left to do.
	unix.Exit(0)
}

// prepare does what needs no command, while a spare supervisor waits for
// one: the parent-death signal, the subreaper, the signal handling and
// threads it will need, and no capabilities or new privileges (on this
// thread, which forks the command).
func prepare(setup Setup) (*sync.WaitGroup, chan os.Signal, error) {
	// SIGHUP when the server dies (even by SIGKILL). A spare that gets it
	// also reads the end of its connection (the server's end is closed with
	// it) and exits; a supervisor with a command ends everything.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGHUP), 0, 0, 0); err != nil {
		return nil, nil, fmt.Errorf("sandbox supervisor: PR_SET_PDEATHSIG: %v", err)
	}
	if os.Getppid() != setup.Parent {
		return nil, nil, fmt.Errorf("sandbox supervisor: the server exited before the command started")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, nil, fmt.Errorf("sandbox supervisor: PR_SET_CHILD_SUBREAPER: %v", err)
	}
	// Every thread counts against max_processes: make those the supervisor
	// will need now, before the limit applies, so a fork bomb cannot leave
	// it unable to start one.
	warm := prewarmThreads(3)
	if err := dropCapabilities(); err != nil {
		return nil, nil, fmt.Errorf("sandbox supervisor: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, nil, fmt.Errorf("sandbox supervisor: PR_SET_NO_NEW_PRIVS: %v", err)
	}
	return warm, sigs, nil
}

// receive waits for the Spec on ConnFD and makes the output it brings the
// supervisor's stdout and stderr. It returns io.EOF when the server closed
// the connection instead.
func receive() (Spec, error) {
	var sp Spec
	buf := make([]byte, MaxSpec)
	oob := make([]byte, unix.CmsgSpace(2*4))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(ConnFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	var fds []int
	if err == nil && oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		for i := 0; perr == nil && i < len(msgs); i++ {
			var more []int
			more, perr = unix.ParseUnixRights(&msgs[i])
			fds = append(fds, more...)
		}
		if perr != nil {
			err = perr
		}
	}
	switch {
	case err != nil:
		return sp, fmt.Errorf("receiving the command: %v", err)
	case n == 0 && oobn == 0:
		return sp, io.EOF
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		return sp, fmt.Errorf("the command's description is larger than %d bytes", MaxSpec)
	}
	if err := json.Unmarshal(buf[:n], &sp); err != nil {
		return sp, fmt.Errorf("reading the command's description: %v", err)
	}
	want := 1
	if sp.Landlock {
		want = 2
	}
	if len(fds) != want {
		return sp, fmt.Errorf("received %d descriptors with the command, want %d", len(fds), want)
	}
	// The command's output is the supervisor's too: a crash report of its
	// own reaches the result.
	for _, to := range []int{1, 2} {
		if err := unix.Dup3(fds[0], to, 0); err != nil {
			return sp, fmt.Errorf("taking the command's output: %v", err)
		}
	}
	unix.Close(fds[0])
	if sp.Landlock {
		if err := unix.Dup3(fds[1], landlockFD, unix.O_CLOEXEC); err != nil {
			return sp, fmt.Errorf("taking the Landlock ruleset: %v", err)
		}
		unix.Close(fds[1])
	}
	return sp, nil
}

// landlockFD is where receive puts the Landlock ruleset: the connection's
// neighbour, free once closeOnExecFrom has run.
const landlockFD = ConnFD + 1

// closeOnExecFrom marks every descriptor from fd up close-on-exec.
func closeOnExecFrom(fd int) {
	if unix.CloseRange(uint(fd), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	entries, _ := os.ReadDir("/proc/self/fd") // kernels before 5.11
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= fd {
			unix.CloseOnExec(n)
		}
	}
}

// reaped is one wait4 result.
type reaped struct {
	pid    int
	status unix.WaitStatus
	usage  unix.Rusage
}

// supervise runs sp's command on the locked thread, prepared; sigs are the
// signals that end it.
func supervise(setup Setup, sp Spec, sigs <-chan os.Signal) Exit {
	fail := func(format string, args ...any) Exit {
		return Exit{Code: -1, Error: fmt.Sprintf(format, args...)}
	}
	// The server may have died while a spare waited.
	if os.Getppid() != setup.Parent {
		return fail("sandbox supervisor: the server exited before the command started")
	}
	if sp.Landlock {
		// The ruleset the server made; on this thread only, which forks the
		// command (restricting every thread costs a signal round to each
		// before Landlock ABI 8, and gains nothing).
		if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, landlockFD, uintptr(sp.LandlockFlags), 0); e != 0 {
			return fail("sandbox supervisor: landlock_restrict_self: %v", e)
		}
		unix.Close(landlockFD)
	}
	if len(setup.Filter) > 0 {
		if err := loadFilter(setup.Filter, os.Getpid()); err != nil {
			return fail("sandbox supervisor: seccomp: %v", err)
		}
	}
	if err := setLimits(setup.Limits); err != nil {
		return fail("sandbox supervisor: %v", err)
	}
	child, err := startCommand(sp, setup.Limits)
	if err != nil {
		return fail("%v", err)
	}

	done := make(chan reaped)
	go reap(done)
	grace := time.Duration(sp.GraceMillis) * time.Millisecond
	var (
		exit     = Exit{Code: -1}
		ending   bool             // SIGTERM has gone to every descendant
		killing  bool             // SIGKILL goes to every descendant until none is left
		deadline <-chan time.Time // SIGKILL after the grace
		tick     = time.NewTicker(50 * time.Millisecond)
		startEnd = func() {
			if !ending {
				ending = true
				signalTree(syscall.SIGTERM)
				deadline = time.After(grace)
			}
		}
	)
	defer tick.Stop()
	for {
		select {
		case r, ok := <-done:
			if !ok {
				return exit // no child left
			}
			if r.pid == child {
				exit = exitOf(r, setup.Limits)
				if !hasChildren() {
					return exit // it left nothing running: the common case, made fast
				}
				startEnd() // whatever it left running
			}
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				killing = true
				signalTree(syscall.SIGKILL)
			}
			startEnd()
		case <-deadline:
			killing = true
			signalTree(syscall.SIGKILL)
		case <-tick.C:
			if os.Getppid() != setup.Parent { // the server is gone: belt and braces for the parent-death signal
				killing = true
			}
			if killing {
				signalTree(syscall.SIGKILL)
			}
		}
	}
}

// startCommand starts the command. With memory_bytes, the limit must go on
// the command alone (the Go runtime, the race detector's above all, reserves
// more address space than any useful limit), and before its first
// instruction: so it starts traced, stops at its exec, gets the limit and is
// let go.
func startCommand(sp Spec, limits Limits) (int, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	trace := limits.MemoryBytes > 0
	// Ptrace requests come from the thread that started the tracee: the
	// supervisor's locked one.
	child, err := syscall.ForkExec(sp.Path, sp.Argv, &syscall.ProcAttr{
		Dir:   sp.Dir,
		Env:   sp.Env,
		Files: []uintptr{devnull.Fd(), 1, 2},
		// Its own group, so it does not share the supervisor's; SIGKILL if
		// the supervisor dies anyway.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Ptrace: trace},
	})
	if err != nil {
		return 0, fmt.Errorf("cannot start %s: %v", sp.Argv[0], err)
	}
	if !trace {
		return child, nil
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(child, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		_ = unix.Kill(child, syscall.SIGKILL)
		return 0, fmt.Errorf("sandbox supervisor: the command did not stop at its start (%v, status %v)", err, ws)
	}
	lim := unix.Rlimit{Cur: limits.MemoryBytes, Max: limits.MemoryBytes}
	err = unix.Prlimit(child, unix.RLIMIT_AS, &lim, nil)
	if err == nil {
		err = unix.PtraceDetach(child)
	}
	if err != nil {
		_ = unix.Kill(child, syscall.SIGKILL)
		return 0, fmt.Errorf("sandbox supervisor: setting memory_bytes: %v", err)
	}
	return child, nil
}

// dropCapabilities leaves the supervisor's thread, and so the command, without
// capabilities, even as root: none in its sets, none in the bounding set
// that a root program's exec would draw from. Without CAP_SYS_PTRACE and
// with fewer capabilities than the server, a root command cannot read the
// server's /proc files (environ among them), which Landlock leaves to
// ptrace's usual checks. Not being non-root, this is best effort: an
// unprivileged supervisor has no capabilities to drop.
func dropCapabilities() error {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) // its own /proc files, too
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL && err != unix.EPERM {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping capabilities: %w", err)
	}
	return nil
}

// loadFilter installs the seccomp program on the calling thread (locked,
// with no-new-privileges), and so on the command it forks, with SelfPID
// replaced by self.
func loadFilter(insns []Insn, self int) error {
	placeholder := int32(SelfPID)
	filter := make([]unix.SockFilter, len(insns))
	for i, in := range insns {
		k := in.K
		switch k {
		case uint32(placeholder):
			k = uint32(self)
		case uint32(-placeholder):
			k = uint32(-self)
		}
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: k}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", e)
	}
	return nil
}

// prewarmThreads makes the Go runtime start n more threads, which it keeps
// for later use; wait on the result before relying on them.
func prewarmThreads(n int) *sync.WaitGroup {
	var locked, released sync.WaitGroup
	done := make(chan struct{})
	for range n {
		locked.Add(1)
		released.Add(1)
		go func() {
			defer released.Done()
			runtime.LockOSThread()
			locked.Done()
			<-done
			runtime.UnlockOSThread()
		}()
	}
	go func() {
		locked.Wait()
		close(done)
	}()
	return &released
}

// reap reaps every child (the command, and the orphans the supervisor
// inherits as subreaper) and closes done when none is left.
func reap(done chan<- reaped) {
	defer close(done)
	for {
		var r reaped
		pid, err := unix.Wait4(-1, &r.status, 0, &r.usage)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return // ECHILD: no child left
		}
		r.pid = pid
		done <- r
	}
}

// exitOf says how the command ended, and which limit ended it.
func exitOf(r reaped, l Limits) Exit {
	ws := r.status
	if ws.Exited() {
		return Exit{Code: ws.ExitStatus()}
	}
	e := Exit{Code: -1, Signal: int(ws.Signal())}
	cpu := time.Duration(r.usage.Utime.Nano() + r.usage.Stime.Nano())
	switch {
	case ws.Signal() == syscall.SIGXCPU,
		ws.Signal() == syscall.SIGKILL && l.CPUSeconds > 0 && cpu >= time.Duration(l.CPUSeconds)*time.Second:
		e.Limit = "cpu_seconds"
	case ws.Signal() == syscall.SIGXFSZ:
		e.Limit = "max_file_bytes"
	}
	return e
}

// setLimits applies l but memory_bytes to the supervisor, and so to the
// command it starts.
// RLIMIT_CPU's hard limit is a second above the soft one: SIGXCPU first,
// SIGKILL for a command that ignores it.
func setLimits(l Limits) error {
	set := func(name string, res int, soft, hard uint64) error {
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: soft, Max: hard}); err != nil {
			return fmt.Errorf("setting %s to %d: %w", name, soft, err)
		}
		return nil
	}
	// No core dumps: SIGXCPU and SIGXFSZ would write them into the workspace.
	if err := set("RLIMIT_CORE", unix.RLIMIT_CORE, 0, 0); err != nil {
		return err
	}
	lims := []struct {
		name string
		res  int
		v    uint64
		hard uint64
	}{
		{"cpu_seconds", unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds + 1},
		{"max_open_files", unix.RLIMIT_NOFILE, l.MaxOpenFiles, l.MaxOpenFiles},
		{"max_file_bytes", unix.RLIMIT_FSIZE, l.MaxFileBytes, l.MaxFileBytes},
		{"max_processes", unix.RLIMIT_NPROC, l.MaxProcesses, l.MaxProcesses},
	}
	for _, x := range lims {
		if x.v == 0 {
			continue
		}
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(x.res, &cur); err != nil {
			return err
		}
		// An unprivileged process cannot raise its hard limit: keep the
		// lower of the two.
		soft, hard := min(x.v, cur.Max), min(x.hard, cur.Max)
		if err := set(x.name, x.res, soft, hard); err != nil {
			return err
		}
	}
	return nil
}

// signalTree sends sig to every descendant of the supervisor. Orphans are
// the supervisor's children (it is their subreaper), so one pass over /proc
// finds every process the command started.
func signalTree(sig syscall.Signal) {
	for _, pid := range descendants(os.Getpid()) {
		_ = unix.Kill(pid, sig)
	}
}

// hasChildren says whether the supervisor has a child left, without
// reaping it.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

// descendants lists the processes whose parent chain leads to root, from
// each process's children files where the kernel has them (one read per
// descendant), else from every process's stat.
func descendants(root int) []int {
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children"); err == nil {
		var out []int
		queue := []int{root}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
			for _, t := range tasks {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
				for _, f := range strings.Fields(string(b)) {
					if c, err := strconv.Atoi(f); err == nil {
						out = append(out, c)
						queue = append(queue, c)
					}
				}
			}
		}
		return out
	}
	return scanDescendants(root)
}

// scanDescendants is descendants from every process's stat.
func scanDescendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
