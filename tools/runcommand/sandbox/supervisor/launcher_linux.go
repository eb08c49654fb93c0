package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// launch is what a supervisor sends its launcher: the command, and how to
// restrict it. The command's output comes with it, and the Landlock
// ruleset when Landlock.
type launch struct {
	Path          string   `json:"path"`
	Argv          []string `json:"argv"`
	Dir           string   `json:"dir"`
	Env           []string `json:"env"`
	Landlock      bool     `json:"landlock"`
	LandlockFlags uint32   `json:"landlock_flags"`
	User          *User    `json:"user,omitempty"`
	Cgroup        string   `json:"cgroup,omitempty"`
}

// launchReply is the launcher's answer: an error, or nothing (with the
// seccomp listener, when the filter has one) once it is restricted and
// about to execute the command. A second reply, an error, follows only if
// execve fails; otherwise the connection closes on exec.
type launchReply struct {
	Error string `json:"error,omitempty"`
}

// launchRulesetFD is where the launcher keeps the Landlock ruleset.
const launchRulesetFD = ConnFD + 1

// Launch runs the launcher: started by a supervisor (its parent, outside
// the sandbox) before there is a command, it waits on ConnFD for one, then
// restricts itself and executes it, keeping its PID: the command is the
// supervisor's child. Everything runs on the main thread, which execve
// keeps; the restrictions that are per thread (credentials, Landlock,
// seccomp) are put on that thread only. It does not return.
func Launch() {
	runtime.LockOSThread()
	unix.CloseOnExec(ConnFD)
	closeOnExecFrom(ConnFD + 1)
	var setup Setup
	err := json.Unmarshal([]byte(os.Getenv(SetupEnv)), &setup)
	os.Unsetenv(SetupEnv)
	l, rerr := receiveLaunch()
	if rerr == errEOF {
		unix.Exit(0) // the supervisor no longer needs it
	}
	if err == nil {
		err = rerr
	}
	var listener int
	if err == nil {
		listener, err = restrict(setup, l)
	}
	if err != nil {
		replyLaunch(launchReply{Error: err.Error()}, -1)
		unix.Exit(126)
	}
	// Built before the memory limit applies: nothing may allocate after it.
	path, perr := unix.BytePtrFromString(l.Path)
	argv, aerr := ptrs(l.Argv)
	envv, eerr := ptrs(l.Env)
	if err := firstErr(perr, aerr, eerr); err != nil {
		replyLaunch(launchReply{Error: fmt.Sprintf("cannot start %s: %v", l.Argv[0], err)}, listener)
		unix.Exit(126)
	}
	replyLaunch(launchReply{}, listener)
	if listener >= 0 {
		unix.Close(listener)
	}
	if m := setup.Limits.MemoryBytes; m > 0 {
		// On the command alone, and last: the Go runtime (the race
		// detector's above all) reserves more address space than any
		// useful limit.
		lim := unix.Rlimit{Cur: m, Max: m}
		_, _, _ = unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_AS, uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	}
	_, _, e := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	replyLaunch(launchReply{Error: fmt.Sprintf("cannot start %s: %v", l.Argv[0], e)}, -1)
	unix.Exit(127)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ptrs is a NULL-terminated array of C strings.
func ptrs(ss []string) ([]*byte, error) {
	out := make([]*byte, 0, len(ss)+1)
	for _, s := range ss {
		p, err := unix.BytePtrFromString(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return append(out, nil), nil
}

var errEOF = fmt.Errorf("end of connection")

// receiveLaunch waits for the command on ConnFD and makes its output the
// launcher's stdout and stderr.
func receiveLaunch() (launch, error) {
	var l launch
	b, fds, err := recvMsg(ConnFD, MaxSpec, 2)
	switch {
	case err != nil:
		return l, fmt.Errorf("sandbox launcher: receiving the command: %v", err)
	case len(b) == 0 && len(fds) == 0:
		return l, errEOF
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("sandbox launcher: reading the command: %v", err)
	}
	want := 1
	if l.Landlock {
		want = 2
	}
	if len(fds) != want || len(l.Argv) == 0 {
		return l, fmt.Errorf("sandbox launcher: received %d descriptors and %d arguments", len(fds), len(l.Argv))
	}
	for _, to := range []int{1, 2} {
		if err := unix.Dup3(fds[0], to, 0); err != nil {
			return l, fmt.Errorf("sandbox launcher: taking the command's output: %v", err)
		}
	}
	unix.Close(fds[0])
	if l.Landlock {
		if err := unix.Dup3(fds[1], launchRulesetFD, unix.O_CLOEXEC); err != nil {
			return l, fmt.Errorf("sandbox launcher: taking the Landlock ruleset: %v", err)
		}
		unix.Close(fds[1])
	}
	return l, nil
}

// restrict puts every restriction on the launcher's thread, in the order
// each needs: the cgroup and the OOM score while it may still write them,
// capabilities from the bounding set while it holds CAP_SETPCAP, the
// session's uid while it holds CAP_SETUID, the working folder with that
// uid's rights, the resource limits, then no new privileges, Landlock and
// seccomp. It returns the seccomp listener, or -1.
func restrict(setup Setup, l launch) (int, error) {
	fail := func(format string, args ...any) (int, error) {
		return -1, fmt.Errorf("sandbox launcher: "+format, args...)
	}
	if l.Cgroup != "" {
		if err := os.WriteFile(l.Cgroup+"/cgroup.procs", []byte("0\n"), 0); err != nil {
			return fail("joining the call's cgroup: %v", err)
		}
	}
	// The command, not the server or a supervisor, is what the OOM killer
	// should pick first.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000\n"), 0)
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL && err != unix.EPERM {
			return fail("dropping capability %d from the bounding set: %v", c, err)
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	if u := l.User; u != nil {
		// This thread only (execve keeps it); the raw calls do not go to
		// the runtime's other threads as syscall.Setresuid would.
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fail("setgroups: %v", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(u.GID), uintptr(u.GID), uintptr(u.GID)); e != 0 {
			return fail("setresgid %d: %v", u.GID, e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(u.UID), uintptr(u.UID), uintptr(u.UID)); e != 0 {
			return fail("setresuid %d: %v", u.UID, e)
		}
		// The change of uid cleared the parent-death signal.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
			return fail("PR_SET_PDEATHSIG: %v", err)
		}
		if os.Getppid() == 1 {
			return fail("the supervisor exited before the command started")
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fail("dropping capabilities: %v", err)
	}
	if err := unix.Chdir(l.Dir); err != nil {
		return fail("cannot enter %s: %v", l.Dir, err)
	}
	if err := setLimits(setup.Limits); err != nil {
		return fail("%v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("PR_SET_NO_NEW_PRIVS: %v", err)
	}
	if l.Landlock {
		if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, launchRulesetFD, uintptr(l.LandlockFlags), 0); e != 0 {
			return fail("landlock_restrict_self: %v", e)
		}
		unix.Close(launchRulesetFD)
	}
	listener := -1
	if len(setup.Filter) > 0 {
		var err error
		if listener, err = loadFilter(setup.Filter, os.Getppid(), len(setup.Notify) > 0); err != nil {
			return fail("seccomp: %v", err)
		}
	}
	return listener, nil
}

// replyLaunch sends the launcher's reply, with the listener when fd >= 0.
func replyLaunch(r launchReply, fd int) {
	b, _ := json.Marshal(r)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	for {
		if err := unix.Sendmsg(ConnFD, b, oob, nil, unix.MSG_NOSIGNAL); err != unix.EINTR {
			return
		}
	}
}

// loadFilter installs the seccomp program on the calling thread (locked,
// with no-new-privileges), and so on the command it executes, with SelfPID
// replaced by self. With notify, it returns the listener the notified
// system calls wait on; their caller's only fatal signals interrupt the
// wait once the supervisor has taken a notification (kernels from 5.19).
func loadFilter(insns []Insn, self int, notify bool) (int, error) {
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
	var flags uintptr
	if notify {
		flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
	}
	for {
		r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
		switch {
		case e == unix.EINVAL && flags&unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV != 0:
			flags &^= unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV // before 5.19
			continue
		case e != 0:
			return -1, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", e)
		case notify:
			unix.CloseOnExec(int(r))
			return int(r), nil
		}
		return -1, nil
	}
}

// setLimits applies l but memory_bytes to the calling process.
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
