package supervisor

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The command starts as a fork of the supervisor that restricts itself and
// executes the program: only that child, never the supervisor, enters the
// command's Landlock domain and seccomp filter. Between fork and execve the
// child may neither allocate nor grow its stack (the Go runtime is not
// usable there), so it makes raw system calls only, on arguments built
// before the fork (a starter), as package syscall's own forkExec does; it
// borrows the runtime's fork hooks the same way gVisor does.

//go:linkname runtimeBeforeFork syscall.runtime_BeforeFork
func runtimeBeforeFork()

//go:linkname runtimeAfterFork syscall.runtime_AfterFork
func runtimeAfterFork()

//go:linkname runtimeAfterForkInChild syscall.runtime_AfterForkInChild
func runtimeAfterForkInChild()

// The steps of the child, named in the error it reports.
var steps = [...]string{
	"", "setpgid", "PR_SET_PDEATHSIG", "the supervisor exited before the command started", "stdin",
	"joining the call's cgroup", "dropping capabilities from the bounding set", "setgroups",
	"setresgid", "setresuid", "dropping capabilities", "cannot enter the working folder",
	"setting the resource limits", "PR_SET_NO_NEW_PRIVS", "landlock_restrict_self",
	"seccomp(SECCOMP_SET_MODE_FILTER)", "handing the seccomp listener to the supervisor", "execve",
}

const stepExec = 17

// starter is everything the child needs, made before the fork.
type starter struct {
	path       *byte
	argv, envv []*byte
	dir        *byte
	stdin      int // /dev/null
	sock       int // the child's end of a socket pair with the supervisor, close-on-exec
	parent     int // the supervisor

	cgroupProcs *byte // the call's cgroup.procs, or nil
	oomAdj      *byte // /proc/self/oom_score_adj

	user     bool
	uid, gid uintptr

	limits   [5]limit
	nlimits  int
	asLimit  unix.Rlimit // RLIMIT_AS, applied last; Cur 0: none
	ruleset  int         // the Landlock ruleset, or -1
	llFlags  uintptr
	prog     unix.SockFprog // Len 0: no filter
	seccompF uintptr        // its flags

	// The message that carries the listener: one byte and SCM_RIGHTS.
	msg     unix.Msghdr
	iov     unix.Iovec
	payload [1]byte
	cmsg    [24]byte // unix.CmsgSpace(4)
	report  [8]byte  // step and errno, when a step fails
	oomText [5]byte
	digit   [2]byte // "0\n"
}

// atFDCWD is AT_FDCWD as a system call argument.
var atFDCWD = ^uintptr(99) // -100

type limit struct {
	res uintptr
	lim unix.Rlimit
}

// newStarter builds the child's arguments for sp under setup's limits and
// filter (with the supervisor's PID filled in).
func newStarter(setup Setup, sp Spec, sock, ruleset int, filter []unix.SockFilter) (*starter, error) {
	s := &starter{sock: sock, parent: os.Getpid(), ruleset: ruleset, llFlags: uintptr(sp.LandlockFlags)}
	var err error
	if s.path, err = unix.BytePtrFromString(sp.Path); err != nil {
		return nil, err
	}
	if s.argv, err = ptrs(sp.Argv); err != nil {
		return nil, err
	}
	if s.envv, err = ptrs(sp.Env); err != nil {
		return nil, err
	}
	if s.dir, err = unix.BytePtrFromString(sp.Dir); err != nil {
		return nil, err
	}
	if s.stdin, err = unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, err
	}
	if sp.Cgroup != "" {
		if s.cgroupProcs, err = unix.BytePtrFromString(sp.Cgroup + "/cgroup.procs"); err != nil {
			return nil, err
		}
	}
	s.oomAdj, _ = unix.BytePtrFromString("/proc/self/oom_score_adj")
	copy(s.oomText[:], "1000\n")
	copy(s.digit[:], "0\n")
	if u := sp.User; u != nil {
		s.user, s.uid, s.gid = true, uintptr(u.UID), uintptr(u.GID)
	}
	// The limits, each the lower of the setting and the hard limit the
	// supervisor has (an unprivileged process cannot raise it); no core
	// dumps (SIGXCPU and SIGXFSZ would write them into the workspace);
	// RLIMIT_CPU's hard limit a second above its soft one: SIGXCPU first,
	// SIGKILL for a command that ignores it. RLIMIT_NPROC counts the whole
	// uid, so it holds what the uid's calls may hold together; one call's
	// share (max_processes) the supervisor holds at each clone.
	l := setup.Limits
	s.add(unix.RLIMIT_CORE, 0, 0)
	for _, x := range []struct {
		res        int
		soft, hard uint64
	}{
		{unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds + 1},
		{unix.RLIMIT_NOFILE, l.MaxOpenFiles, l.MaxOpenFiles},
		{unix.RLIMIT_FSIZE, l.MaxFileBytes, l.MaxFileBytes},
		{unix.RLIMIT_NPROC, l.UIDProcesses, l.UIDProcesses},
	} {
		if x.soft == 0 {
			continue
		}
		var cur unix.Rlimit
		if err := unix.Getrlimit(x.res, &cur); err != nil {
			return nil, err
		}
		s.add(x.res, min(x.soft, cur.Max), min(x.hard, cur.Max))
	}
	if l.MemoryBytes > 0 {
		// On the command alone, and last: the supervisor's Go runtime
		// reserves more address space than any useful limit.
		s.asLimit = unix.Rlimit{Cur: l.MemoryBytes, Max: l.MemoryBytes}
	}
	if len(filter) > 0 {
		s.prog = unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		if len(setup.Notify) > 0 {
			s.seccompF = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
		}
	}
	s.payload[0] = 'L'
	s.iov = unix.Iovec{Base: &s.payload[0], Len: 1}
	s.msg.Iov, s.msg.Iovlen = &s.iov, 1
	h := (*unix.Cmsghdr)(unsafe.Pointer(&s.cmsg[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_RIGHTS
	h.SetLen(unix.CmsgLen(4))
	s.msg.Control = &s.cmsg[0]
	s.msg.SetControllen(unix.CmsgSpace(4))
	return s, nil
}

func (s *starter) add(res int, soft, hard uint64) {
	s.limits[s.nlimits] = limit{uintptr(res), unix.Rlimit{Cur: soft, Max: hard}}
	s.nlimits++
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

// errStep is a step of the child that failed.
type errStep struct {
	step  uint32
	errno syscall.Errno
}

func (e errStep) Error() string {
	if int(e.step) < len(steps) {
		if e.step == 3 {
			return "sandbox supervisor: " + steps[e.step]
		}
		return fmt.Sprintf("sandbox supervisor: %s: %v", steps[e.step], e.errno)
	}
	return fmt.Sprintf("sandbox supervisor: step %d: %v", e.step, e.errno)
}

// fork starts the child, which restricts itself and executes the command;
// it returns the child's PID once the child has executed the command or
// failed. The child's parent is the calling thread (the supervisor's locked
// main one), whose end its parent-death signal follows.
//
//go:noinline
//go:norace
//go:nocheckptr
func (s *starter) fork() (int, syscall.Errno) {
	var (
		r1       uintptr
		errno    uintptr
		e        syscall.Errno
		step     uint32
		fd       uintptr
		listener uintptr
		i        int
		empty    [2]unix.CapUserData
		hdr      = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		flags    = s.seccompF
	)
	runtimeBeforeFork()
	// As package syscall does: the child shares the supervisor's memory,
	// which is suspended until the child executes or exits, so no page
	// table is copied. The child writes only its own locals and the
	// starter's buffers, which the supervisor reads afterwards anyway.
	r1, errno = rawVfork(syscall.SYS_CLONE, syscall.CLONE_VM|syscall.CLONE_VFORK|uintptr(syscall.SIGCHLD), 0, 0)
	if errno != 0 || r1 != 0 {
		runtimeAfterFork()
		return int(r1), syscall.Errno(errno)
	}
	// The child: raw system calls only, until execve.
	runtimeAfterForkInChild()
	if _, _, e = syscall.RawSyscall(syscall.SYS_SETPGID, 0, 0, 0); e != 0 {
		step = 1
		goto fail
	}
	if _, _, e = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0, 0); e != 0 {
		step = 2
		goto fail
	}
	if r1, _, _ = syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0); int(r1) != s.parent {
		step = 3
		goto fail
	}
	if _, _, e = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(s.stdin), 0, 0); e != 0 {
		step = 4
		goto fail
	}
	if s.cgroupProcs != nil {
		if fd, _, e = syscall.RawSyscall6(syscall.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(s.cgroupProcs)), uintptr(unix.O_WRONLY|unix.O_CLOEXEC), 0, 0, 0); e != 0 {
			step = 5
			goto fail
		}
		if _, _, e = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&s.digit[0])), 2); e != 0 {
			step = 5
			goto fail
		}
		syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	}
	// The command, not the server or a supervisor, is what the OOM killer
	// should pick first.
	if fd, _, e = syscall.RawSyscall6(syscall.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(s.oomAdj)), uintptr(unix.O_WRONLY|unix.O_CLOEXEC), 0, 0, 0); e == 0 {
		syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&s.oomText[0])), 5)
		syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	}
	for i = 0; i <= unix.CAP_LAST_CAP; i++ {
		if _, _, e = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(i), 0, 0, 0, 0); e != 0 && e != syscall.EINVAL && e != syscall.EPERM {
			step = 6
			goto fail
		}
	}
	syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0)
	if s.user {
		if _, _, e = syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			step = 7
			goto fail
		}
		if _, _, e = syscall.RawSyscall(syscall.SYS_SETRESGID, s.gid, s.gid, s.gid); e != 0 {
			step = 8
			goto fail
		}
		if _, _, e = syscall.RawSyscall(syscall.SYS_SETRESUID, s.uid, s.uid, s.uid); e != 0 {
			step = 9
			goto fail
		}
		// The change of uid cleared the parent-death signal.
		if _, _, e = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0, 0); e != 0 {
			step = 2
			goto fail
		}
		if r1, _, _ = syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0); int(r1) != s.parent {
			step = 3
			goto fail
		}
	}
	if _, _, e = syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&empty[0])), 0); e != 0 {
		step = 10
		goto fail
	}
	if _, _, e = syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(s.dir)), 0, 0); e != 0 {
		step = 11
		goto fail
	}
	for i = 0; i < s.nlimits; i++ {
		if _, _, e = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, s.limits[i].res, uintptr(unsafe.Pointer(&s.limits[i].lim)), 0, 0, 0); e != 0 {
			step = 12
			goto fail
		}
	}
	if _, _, e = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		step = 13
		goto fail
	}
	if s.ruleset >= 0 {
		if _, _, e = syscall.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(s.ruleset), s.llFlags, 0); e != 0 {
			step = 14
			goto fail
		}
		syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(s.ruleset), 0, 0)
	}
	if s.prog.Len > 0 {
		for {
			listener, _, e = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&s.prog)))
			if e == syscall.EINVAL && flags&unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV != 0 {
				flags &^= unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV // before Linux 5.19
				continue
			}
			break
		}
		if e != 0 {
			step = 15
			goto fail
		}
		if flags&unix.SECCOMP_FILTER_FLAG_NEW_LISTENER != 0 {
			*(*int32)(unsafe.Pointer(&s.cmsg[unix.SizeofCmsghdr])) = int32(listener)
			if _, _, e = syscall.RawSyscall(syscall.SYS_SENDMSG, uintptr(s.sock), uintptr(unsafe.Pointer(&s.msg)), unix.MSG_NOSIGNAL); e != 0 {
				step = 16
				goto fail
			}
			syscall.RawSyscall(syscall.SYS_CLOSE, listener, 0, 0)
		}
	}
	if s.asLimit.Cur > 0 {
		if _, _, e = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, unix.RLIMIT_AS, uintptr(unsafe.Pointer(&s.asLimit)), 0, 0, 0); e != 0 {
			step = 12
			goto fail
		}
	}
	_, _, e = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(s.path)), uintptr(unsafe.Pointer(&s.argv[0])), uintptr(unsafe.Pointer(&s.envv[0])))
	step = stepExec
fail:
	*(*uint32)(unsafe.Pointer(&s.report[0])) = step
	*(*uint32)(unsafe.Pointer(&s.report[4])) = uint32(e)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(s.sock), uintptr(unsafe.Pointer(&s.report[0])), 8)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 127, 0, 0)
	}
}
