package supervisor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Main runs the supervisor: it prepares what needs no command (the
// parent-death signal, the subreaper, the seccomp program, no capabilities
// it does not need), waits for its Spec, starts the command as a child that
// restricts itself, takes the session's uid when the Spec names one,
// answers the filter's notifications, watches the command's tree, ends
// every process the command started and reports how the command ended on
// ConnFD. Then, when nothing of the command is left and its end left the
// supervisor as it was, it says so in its report (Exit.Again) and waits
// for the server's next Spec (the server keeps such a supervisor for its
// next command of the same uid); otherwise it exits. It does not return.
func Main() {
	// No descriptor but stdin, stdout and stderr may reach the command:
	// not the connection, not whatever the server inherited without
	// close-on-exec.
	closeOnExecFrom(ConnFD)
	// The parent-death signal belongs to this (the main) thread.
	runtime.LockOSThread()
	raw := os.Getenv(SetupEnv)
	os.Unsetenv(SetupEnv)
	var setup Setup
	var s *spare
	err := json.Unmarshal([]byte(raw), &setup)
	if err != nil {
		err = fmt.Errorf("sandbox supervisor: reading its setup: %v", err)
	} else {
		s, err = prepare(setup, raw)
	}
	for served := 1; ; served++ {
		sp, fds, err2 := receive()
		if err2 == io.EOF {
			unix.Exit(0) // a supervisor the server no longer needs, or the server is gone
		}
		var e Exit
		again := false
		switch {
		case err2 != nil:
			e = Exit{Code: -1, Error: fmt.Sprintf("sandbox supervisor: %v", err2)}
		case err != nil:
			e = Exit{Code: -1, Error: err.Error()}
		default:
			e, again = supervise(setup, s, sp, fds)
		}
		// Nothing the command started is left: let go of its output, so
		// that the server reads to its end without waiting for this
		// process's next command or exit.
		if devnull, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.Dup3(devnull, 1, 0)
			_ = unix.Dup3(devnull, 2, 0)
			unix.Close(devnull)
		}
		e.Again = again && served < MaxCommands
		report(Report{Exit: &e})
		if !e.Again {
			// Not os.Exit: under the race detector it waits a second for
			// threads that have nothing left to do.
			unix.Exit(0)
		}
	}
}

// MaxCommands is how many commands one supervisor runs at most, one after
// another, before it exits.
const MaxCommands = 500

// spare is what a supervisor prepared before its first command came.
type spare struct {
	sigs   chan os.Signal
	filter []unix.SockFilter // the seccomp program, its PID filled in
	uid    *User             // the uid it took for a command, if it did
}

// prepare does what needs no command, while a spare supervisor waits for
// one: the parent-death signal, the subreaper, the signal handling, the
// seccomp program, and no capabilities but those it needs to give the
// command and itself a session's uid.
func prepare(setup Setup, raw string) (*spare, error) {
	// SIGHUP when the server dies (even by SIGKILL). A spare that gets it
	// also reads the end of its connection (the server's end is closed with
	// it) and exits; a supervisor with a command ends everything.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGHUP), 0, 0, 0); err != nil {
		return nil, fmt.Errorf("sandbox supervisor: PR_SET_PDEATHSIG: %v", err)
	}
	if os.Getppid() != setup.Parent {
		return nil, fmt.Errorf("sandbox supervisor: the server exited before the command started")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("sandbox supervisor: PR_SET_CHILD_SUBREAPER: %v", err)
	}
	if err := dropCapabilities(setup.SwitchUser); err != nil {
		return nil, fmt.Errorf("sandbox supervisor: %v", err)
	}
	return &spare{sigs: sigs, filter: compileFilter(setup.Filter, os.Getpid())}, nil
}

// compileFilter is the seccomp program with SelfPID replaced by self.
func compileFilter(f Filter, self int) []unix.SockFilter {
	placeholder := int32(SelfPID)
	filter := make([]unix.SockFilter, len(f)/8)
	for i := range filter {
		b := f[8*i:]
		k := binary.LittleEndian.Uint32(b[4:])
		switch k {
		case uint32(placeholder):
			k = uint32(self)
		case uint32(-placeholder):
			k = uint32(-self)
		}
		filter[i] = unix.SockFilter{Code: binary.LittleEndian.Uint16(b), Jt: b[2], Jf: b[3], K: k}
	}
	return filter
}

// receive waits for the Spec on ConnFD and makes the output it brings the
// supervisor's stdout and stderr (a crash report of its own reaches the
// result). It returns io.EOF when the server closed the connection instead,
// and the descriptors that came: the output, and the Landlock ruleset.
func receive() (Spec, []int, error) {
	var sp Spec
	b, fds, err := recvMsg(ConnFD, MaxSpec, 2)
	switch {
	case err != nil:
		return sp, nil, fmt.Errorf("receiving the command: %v", err)
	case len(b) == 0 && len(fds) == 0:
		return sp, nil, io.EOF
	}
	if err := json.Unmarshal(b, &sp); err != nil {
		return sp, fds, fmt.Errorf("reading the command's description: %v", err)
	}
	want := 1
	if sp.Landlock {
		want = 2
	}
	if len(fds) != want || len(sp.Argv) == 0 {
		return sp, fds, fmt.Errorf("received %d descriptors and %d arguments with the command, want %d and some", len(fds), len(sp.Argv), want)
	}
	for _, to := range []int{1, 2} {
		if err := unix.Dup3(fds[0], to, 0); err != nil {
			return sp, fds, fmt.Errorf("taking the command's output: %v", err)
		}
	}
	return sp, fds, nil
}

// report sends r to the server.
func report(r Report) {
	b, _ := json.Marshal(r)
	for {
		if _, err := unix.Write(ConnFD, b); err != unix.EINTR {
			return
		}
	}
}

// reaped is one wait4 result.
type reaped struct {
	pid    int
	status unix.WaitStatus
	usage  unix.Rusage
}

// supervise starts sp's command as a restricted child; fds came with sp
// (the output, already stdout and stderr, and the Landlock ruleset). again
// says the supervisor is fit for another command: nothing of this one is
// left, no answer is still in flight and no signal came from outside.
func supervise(setup Setup, s *spare, sp Spec, fds []int) (e Exit, again bool) {
	fail := func(format string, args ...any) (Exit, bool) {
		return Exit{Code: -1, Error: fmt.Sprintf(format, args...)}, false
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	// The server may have died while the supervisor waited.
	if os.Getppid() != setup.Parent {
		return fail("sandbox supervisor: the server exited before the command started")
	}
	// A signal left from before (a cancellation that came as the last
	// command ended) is not this command's.
	for len(s.sigs) > 0 {
		<-s.sigs
	}
	if s.uid != nil && (sp.User == nil || *s.uid != *sp.User) {
		return fail("sandbox supervisor: it runs as uid %d, not the command's", s.uid.UID)
	}
	ruleset := -1
	if sp.Landlock {
		ruleset = fds[1]
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail("sandbox supervisor: %v", err)
	}
	defer unix.Close(pair[0])
	start := sp
	if s.uid != nil {
		start.User = nil // the supervisor has the uid already, and the child with it
	}
	st, err := newStarter(setup, start, pair[1], ruleset, s.filter)
	if err != nil {
		unix.Close(pair[1])
		return fail("cannot start %s: %v", sp.Argv[0], err)
	}
	child, errno := st.fork()
	unix.Close(pair[1])
	unix.Close(st.stdin)
	if errno != 0 {
		return fail("cannot start %s: %v", sp.Argv[0], errno)
	}
	// The child hands over the filter's listener, then the connection
	// closes on its execve; or it reports the step that failed.
	msg, got, err := recvMsg(pair[0], 8, 1)
	var listener = -1
	switch {
	case err != nil:
		err = fmt.Errorf("sandbox supervisor: %v", err)
	case len(msg) == 8:
		err = starterError(msg, sp)
	case len(msg) == 1 && len(got) == 1:
		listener = got[0]
		msg, _, err = recvMsg(pair[0], 8, 0)
		if err == nil && len(msg) == 8 {
			err = starterError(msg, sp)
		}
	case len(setup.Notify) > 0:
		err = errors.New("sandbox supervisor: the command sent no seccomp listener")
	}
	if err != nil {
		if listener >= 0 {
			unix.Close(listener)
		}
		_ = unix.Kill(child, syscall.SIGKILL)
		_, _ = unix.Wait4(child, nil, 0, nil)
		return Exit{Code: -1, Error: err.Error()}, false
	}
	if sp.User != nil && s.uid == nil {
		// After the fork, which needed the right to take the uid, and
		// before the first notification is answered: the supervisor acts
		// with the command's rights. It keeps them for its next commands,
		// which must be of the same uid.
		if err := switchUser(*sp.User, setup.Parent); err != nil {
			_ = unix.Kill(child, syscall.SIGKILL)
			_, _ = unix.Wait4(child, nil, 0, nil)
			return fail("sandbox supervisor: %v", err)
		}
		u := *sp.User
		s.uid = &u
	}
	maxHeld := int(setup.Limits.MaxOpenFiles)
	if maxHeld <= 0 {
		maxHeld = 4096
	}
	l := newLedger(maxHeld)
	defer l.close()
	procs := newProcLimit(setup.Limits.MaxProcesses, treeTasks)
	m := &mediator{}
	m.locks.approved = map[[2]uint64]bool{}
	served := make(chan struct{})
	if listener >= 0 {
		m = newMediator(listener, setup, sp, l, procs)
		go func() {
			defer close(served)
			m.serve()
		}()
	} else {
		close(served)
	}
	e, clean := run(setup, s, sp, child, newWatch(setup, sp, l, procs, &m.locks))
	// No process is left under the filter, so the listener hangs up and
	// the mediator ends; an answer still in flight (a lock that waits on
	// a process outside the tree, say) makes this supervisor unfit for
	// another command.
	idle := make(chan struct{})
	go func() {
		<-served
		m.busy.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-time.After(time.Second):
		clean = false
	}
	e.Receive, _ = m.receive.Load().(string)
	return e, clean && e.Error == "" && threads() <= maxWarmThreads
}

// maxWarmThreads is the most threads a supervisor may have after a command
// and still wait for the next. Each mediated system call the command made
// at once took a thread of the supervisor's, and one that blocks (a
// connect to a Unix socket whose backlog is full) holds it; the Go runtime
// keeps a thread it made once idle, so a warm supervisor kept them all for
// its next commands, under the uid's RLIMIT_NPROC and counted by no limit
// of theirs (200 blocked connects left one with 210 threads). One that
// grew past this exits instead, and the next command takes a spare. An
// idle supervisor has 6 to 10.
const maxWarmThreads = 32

// threads is how many threads the supervisor has now.
func threads() uint64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return statusKB(status, "Threads:")
}

// starterError reads the step the child reported failing.
func starterError(msg []byte, sp Spec) error {
	e := errStep{step: binary.NativeEndian.Uint32(msg), errno: syscall.Errno(binary.NativeEndian.Uint32(msg[4:]))}
	if e.step == stepExec {
		return fmt.Errorf("cannot start %s: %v", sp.Argv[0], e.errno)
	}
	return e
}

// run watches the command (child) until it and every process it started
// are gone. clean says nothing came from outside (a signal: a
// cancellation, the server's death) while it ran.
func run(setup Setup, s *spare, sp Spec, child int, w *watch) (Exit, bool) {
	done := make(chan reaped)
	go reap(done)
	grace := time.Duration(sp.GraceMillis) * time.Millisecond
	var (
		exit     = Exit{Code: -1}
		exited   bool             // the command itself has been reaped
		ending   bool             // SIGTERM has gone to every descendant
		killing  bool             // SIGKILL goes to every descendant until none is left
		signaled bool             // a signal came from outside
		limit    string           // the aggregate limit the watchdog found exceeded
		deadline <-chan time.Time // SIGKILL after the grace
		tick     = time.NewTicker(w.every)
		startEnd = func() {
			if !ending {
				ending = true
				signalTree(syscall.SIGTERM)
				deadline = time.After(grace)
			}
		}
		finish = func() (Exit, bool) {
			if limit != "" && (!exited || exit.Signal == int(syscall.SIGKILL) || exit.Signal == int(syscall.SIGTERM)) {
				exit.Limit, exit.Detail = limit, w.detail
			}
			w.close(&exit)
			return exit, !signaled
		}
	)
	defer tick.Stop()
	for {
		select {
		case r, ok := <-done:
			if !ok {
				return finish() // no child left
			}
			if r.pid == child {
				exited = true
				exit = exitOf(r, setup.Limits)
				if !hasChildren() {
					// It left nothing running: the common case, made fast.
					// The reaper then ends on its own.
					for range done {
					}
					return finish()
				}
				startEnd() // whatever it left running
			}
		case sig := <-s.sigs:
			signaled = true
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
				killing, signaled = true, true
			}
			if limit == "" {
				if limit = w.check(); limit != "" {
					killing = true
				}
			}
			if killing {
				signalTree(syscall.SIGKILL)
			}
		}
	}
}

// switchUser gives the supervisor the session's uid and gid, on every
// thread; it then has no capabilities. The kernel clears the parent-death
// signal with the change, so it is set again.
func switchUser(u User, parent int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %v", err)
	}
	if err := syscall.Setresgid(u.GID, u.GID, u.GID); err != nil {
		return fmt.Errorf("setresgid %d: %v", u.GID, err)
	}
	if err := syscall.Setresuid(u.UID, u.UID, u.UID); err != nil {
		return fmt.Errorf("setresuid %d: %v", u.UID, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGHUP), 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_PDEATHSIG: %v", err)
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if os.Getppid() != parent {
		return fmt.Errorf("the server exited before the command started")
	}
	return nil
}

// dropCapabilities leaves the supervisor without capabilities, even as
// root, but CAP_SETUID and CAP_SETGID when keep (it takes a session's uid
// once its Spec names it, which drops them too), and not dumpable, so that
// no process of its uid reads its /proc files. Not being non-root, this is
// best effort: an unprivileged supervisor has no capabilities to drop.
func dropCapabilities(keep bool) error {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL && err != unix.EPERM {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if keep {
		var have [2]unix.CapUserData
		if err := unix.Capget(&hdr, &have[0]); err != nil {
			return fmt.Errorf("reading capabilities: %w", err)
		}
		set := uint32(1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID)
		data[0].Effective, data[0].Permitted = have[0].Effective&set, have[0].Permitted&set
	}
	// Per thread; the spare's others hold the server's until the uid
	// changes on every thread.
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	return nil
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

// signalTree sends sig to every descendant of the supervisor. Orphans are
// the supervisor's children (it is their subreaper), so one pass over /proc
// finds every process the command started.
func signalTree(sig syscall.Signal) {
	for _, p := range descendants(os.Getpid()) {
		_ = unix.Kill(p, sig)
	}
}

// hasChildren says whether the supervisor has a child left, without
// reaping it.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

// recvMsg receives one message of at most size bytes and up to maxFDs
// descriptors (close-on-exec) on fd.
func recvMsg(fd, size, maxFDs int) ([]byte, []int, error) {
	buf := make([]byte, size)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		for i := 0; err == nil && i < len(msgs); i++ {
			var more []int
			more, err = unix.ParseUnixRights(&msgs[i])
			fds = append(fds, more...)
		}
		if err != nil {
			return nil, fds, err
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		for _, f := range fds {
			unix.Close(f)
		}
		return nil, nil, fmt.Errorf("a message larger than %d bytes or with more than %d descriptors", size, maxFDs)
	}
	return buf[:n], fds, nil
}

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

// sameTree reports whether two samples of the tree list the same processes.
func sameTree(a, b []Proc) bool { return slices.Equal(a, b) }
