package supervisor

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls Landlock does not govern that the seccomp filter sends to
// the supervisor (user notification): changes of a file's metadata (mode,
// owner, times, extended attributes, inode flags), connecting a socket (a
// Unix socket by path reaches any listener on the host), and flock (a lock
// needs only read access, so a read-only file outside could be locked
// against the host's own lockers). The supervisor performs each one itself,
// on its own copy of the arguments and of the descriptors involved, after
// checking that what it acts on lies beneath the call's roots (the
// workspace and the call's TMPDIR); it never lets the original system call
// go on, so a thread of the command that rewrites the arguments meanwhile
// changes nothing. The supervisor has the command's uid and no
// capabilities, so the kernel's own checks still apply on top.

// Operations, the values of Setup.Notify.
const (
	OpConnect    = "connect"
	OpChmod      = "chmod"        // (path, mode)
	OpFchmod     = "fchmod"       // (fd, mode)
	OpFchmodat   = "fchmodat"     // (dirfd, path, mode)
	OpFchmodat2  = "fchmodat2"    // (dirfd, path, mode, flags)
	OpChown      = "chown"        // (path, uid, gid)
	OpLchown     = "lchown"       // (path, uid, gid)
	OpFchown     = "fchown"       // (fd, uid, gid)
	OpFchownat   = "fchownat"     // (dirfd, path, uid, gid, flags)
	OpUtime      = "utime"        // (path, *utimbuf)
	OpUtimes     = "utimes"       // (path, *timeval[2])
	OpFutimesat  = "futimesat"    // (dirfd, path, *timeval[2])
	OpUtimensat  = "utimensat"    // (dirfd, path, *timespec[2], flags)
	OpSetxattr   = "setxattr"     // (path, name, value, size, flags)
	OpLsetxattr  = "lsetxattr"    // (path, name, value, size, flags)
	OpFsetxattr  = "fsetxattr"    // (fd, name, value, size, flags)
	OpRemovexatt = "removexattr"  // (path, name)
	OpLremovexat = "lremovexattr" // (path, name)
	OpFremovexat = "fremovexattr" // (fd, name)
	OpIoctl      = "ioctl"        // (fd, FS_IOC_SETFLAGS or FS_IOC_FSSETXATTR, arg)
	OpFlock      = "flock"        // (fd, operation)
)

// Ioctl commands the filter sends to the supervisor: they set inode flags
// (append-only, no-dump, ...) and, with FSSETXATTR, project IDs.
const (
	fsIocSetflags   = unix.FS_IOC_SETFLAGS
	fsIoc32Setflags = 0x40046602 // FS_IOC32_SETFLAGS, the same with an int
	fsIocFssetxattr = 0x401c5820 // FS_IOC_FSSETXATTR, _IOW('X', 32, struct fsxattr)
)

// MediatedIoctls are the ioctl commands the filter sends to the supervisor.
var MediatedIoctls = []uint32{fsIocSetflags, fsIoc32Setflags, fsIocFssetxattr}

// notif mirrors struct seccomp_notif.
type notif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	NR    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

// notifResp mirrors struct seccomp_notif_resp.
type notifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// mediator answers the notifications of one command's filter.
type mediator struct {
	fd      int            // the listener
	ops     map[int]string // system call number → operation
	roots   []string       // where it may act, symlinks resolved
	netDeny bool
}

// serve takes notifications until the listener fails (no process is left
// under the filter, or the supervisor is exiting), answering each on a
// goroutine of its own: an operation such as connect may block. It waits
// for them in the runtime's poller, not in a blocking ioctl: a supervisor
// runs on one P, which a thread blocked in a system call would hold until
// the runtime's monitor took it back, delaying everything else.
func (m *mediator) serve() {
	if err := unix.SetNonblock(m.fd, true); err != nil {
		return
	}
	f := os.NewFile(uintptr(m.fd), "seccomp-listener")
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n notif
		var e syscall.Errno
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if k, _ := unix.Poll(pfd, 0); k == 0 {
				return false // nothing yet: wait in the poller
			}
			if pfd[0].Revents&unix.POLLIN == 0 {
				e = unix.EPIPE // hung up: no process is left under the filter
				return true
			}
			n = notif{}
			_, _, e = unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
			return true
		})
		switch {
		case err != nil:
			return
		case e == 0:
			go m.answer(n)
		case e == unix.EINTR || e == unix.ENOENT: // interrupted, or the caller went before it was taken
		default:
			return
		}
	}
}

func (m *mediator) answer(n notif) {
	// Whatever thread runs this acts with no capabilities (the server's
	// may linger on threads the runtime started before the supervisor
	// dropped its own): only the kernel's checks for the command's uid.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		m.reply(notifResp{ID: n.ID, Val: -1, Error: -int32(unix.EPERM)})
		return
	}
	val, errno := m.handle(&n)
	r := notifResp{ID: n.ID, Val: val}
	if errno != 0 {
		r.Val, r.Error = -1, -int32(errno)
	}
	m.reply(r)
}

// reply answers a notification. ENOENT means the caller is gone (killed,
// or interrupted before Linux 5.19): nothing to do.
func (m *mediator) reply(r notifResp) {
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(m.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&r)))
}

// target is the process a notification came from.
type target struct {
	m     *mediator
	n     *notif
	pidfd int
}

func (m *mediator) handle(n *notif) (int64, unix.Errno) {
	op, ok := m.ops[int(n.NR)]
	if !ok {
		return 0, unix.ENOSYS
	}
	pidfd, err := openTask(int(n.PID))
	if err != nil {
		return 0, unix.ESRCH
	}
	defer unix.Close(pidfd)
	t := &target{m: m, n: n, pidfd: pidfd}
	a := n.Args
	switch op {
	case OpConnect:
		return t.connect(int32(a[0]), a[1], a[2])
	case OpFlock:
		return t.flock(int32(a[0]), int(int32(a[1])))
	case OpIoctl:
		return t.ioctl(int32(a[0]), uint32(a[1]), a[2])
	case OpChmod:
		return t.onPath(unix.AT_FDCWD, a[0], false, false, chmod(uint32(a[1])))
	case OpFchmodat:
		return t.onPath(int32(a[0]), a[1], false, false, chmod(uint32(a[2])))
	case OpFchmodat2:
		fl := int(int32(a[3]))
		if fl&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
			return 0, unix.EINVAL
		}
		return t.onPath(int32(a[0]), a[1], fl&unix.AT_SYMLINK_NOFOLLOW != 0, fl&unix.AT_EMPTY_PATH != 0, chmod(uint32(a[2])))
	case OpFchmod:
		return t.onFD(int32(a[0]), chmod(uint32(a[1])))
	case OpChown, OpLchown:
		return t.onPath(unix.AT_FDCWD, a[0], op == OpLchown, false, chown(a[1], a[2]))
	case OpFchownat:
		fl := int(int32(a[4]))
		if fl&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
			return 0, unix.EINVAL
		}
		return t.onPath(int32(a[0]), a[1], fl&unix.AT_SYMLINK_NOFOLLOW != 0, fl&unix.AT_EMPTY_PATH != 0, chown(a[2], a[3]))
	case OpFchown:
		return t.onFD(int32(a[0]), chown(a[1], a[2]))
	case OpUtime, OpUtimes, OpFutimesat, OpUtimensat:
		return t.utimes(op, a)
	case OpSetxattr, OpLsetxattr, OpFsetxattr:
		return t.setxattr(op, a)
	case OpRemovexatt, OpLremovexat, OpFremovexat:
		return t.removexattr(op, a)
	}
	return 0, unix.ENOSYS
}

// openTask returns a pidfd of the task that made the system call, which may
// be any thread of its process (libuv's thread pool chmods, for one): the
// thread itself where the kernel has thread pidfds (6.9), else its process,
// whose descriptors and memory the thread shares.
func openTask(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, 0)
	if err != unix.EINVAL && err != unix.ENOENT { // not a thread group leader (EINVAL; ENOENT from 6.9)
		return fd, err
	}
	if fd, err := unix.PidfdOpen(tid, unix.O_EXCL); err == nil { // PIDFD_THREAD
		return fd, nil
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return -1, err
	}
	tgid := int(statusKB(status, "Tgid:"))
	if tgid == 0 {
		return -1, unix.ESRCH
	}
	return unix.PidfdOpen(tgid, 0)
}

// act is an operation on a resolved descriptor: an O_PATH one from a path,
// or the target's own (duplicated) from a descriptor argument.
type act func(fd int, opath bool) unix.Errno

func chmod(mode uint32) act {
	return func(fd int, opath bool) unix.Errno {
		// No set-user-ID or set-group-ID file may outlive the call.
		if mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			return unix.EPERM
		}
		if !opath {
			return errno(unix.Fchmod(fd, mode))
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return errno(err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return unix.EOPNOTSUPP // Linux has no modes on symlinks
		}
		return errno(unix.Chmod(procFD(fd), mode))
	}
}

func chown(uid, gid uint64) act {
	return func(fd int, opath bool) unix.Errno {
		u, g := int(int32(uid)), int(int32(gid))
		if !opath {
			return errno(unix.Fchown(fd, u, g))
		}
		return errno(unix.Fchownat(fd, "", u, g, unix.AT_EMPTY_PATH))
	}
}

// onPath resolves the path at addr from dirfd as the target would, and
// acts on it when it lies beneath the roots. With empty, an empty path
// means dirfd itself (AT_EMPTY_PATH).
func (t *target) onPath(dirfd int32, addr uint64, nofollow, empty bool, do act) (int64, unix.Errno) {
	path, e := t.str(addr)
	if e != 0 {
		return 0, e
	}
	if path == "" && empty {
		return t.onFD(dirfd, do)
	}
	fd, e := t.resolve(dirfd, path, nofollow)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(fd)
	if e := t.check(fd); e != 0 {
		return 0, e
	}
	return 0, do(fd, true)
}

// onFD acts on the target's descriptor fd when what it names lies beneath
// the roots.
func (t *target) onFD(fd int32, do act) (int64, unix.Errno) {
	mine, e := t.fd(fd)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(mine)
	if e := t.check(mine); e != 0 {
		return 0, e
	}
	return 0, do(mine, isOPath(mine))
}

func isOPath(fd int) bool {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_PATH != 0
}

// check says whether the file fd names lies beneath the roots, and whether
// the target is still waiting for the answer (its PID not reused by then).
func (t *target) check(fd int) unix.Errno {
	if !t.m.beneath(fd) {
		return unix.EACCES
	}
	if !t.valid() {
		return unix.ESRCH
	}
	return 0
}

// beneath reports whether the file fd names lies beneath one of the roots.
// The kernel's own name for it (the descriptor's link in /proc) is the
// file as resolved; Landlock keeps a command from moving or hard-linking
// a file from elsewhere in.
func (m *mediator) beneath(fd int) bool {
	p, err := os.Readlink(procFD(fd))
	if err != nil {
		return false
	}
	for _, r := range m.roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// resolve opens (O_PATH) what path names from the target's dirfd (its
// working folder for AT_FDCWD), following symlinks unless nofollow, and
// refusing magic links such as /proc/self/fd/N, which would resolve in the
// supervisor rather than in the target.
func (t *target) resolve(dirfd int32, path string, nofollow bool) (int, unix.Errno) {
	base := unix.AT_FDCWD
	if !strings.HasPrefix(path, "/") {
		var err error
		if dirfd == unix.AT_FDCWD {
			base, err = unix.Open("/proc/"+strconv.Itoa(int(t.n.PID))+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1, unix.ESRCH
			}
		} else {
			var e unix.Errno
			if base, e = t.fd(dirfd); e != 0 {
				return -1, e
			}
		}
		defer unix.Close(base)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if nofollow {
		how.Flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat2(base, path, &how)
	if err != nil {
		return -1, errno(err)
	}
	return fd, 0
}

// fd duplicates the target's descriptor n into the supervisor.
func (t *target) fd(n int32) (int, unix.Errno) {
	if n < 0 {
		return -1, unix.EBADF
	}
	fd, err := unix.PidfdGetfd(t.pidfd, int(n), 0)
	if err != nil {
		if err == unix.EBADF {
			return -1, unix.EBADF
		}
		return -1, unix.ESRCH
	}
	unix.CloseOnExec(fd)
	return fd, 0
}

// valid reports whether the notification still waits for its answer: the
// target has not died, so its PID and memory are still its own.
func (t *target) valid() bool {
	id := t.n.ID
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.m.fd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return e == 0
}

// mem reads len(b) bytes at addr in the target's memory.
func (t *target) mem(addr uint64, b []byte) unix.Errno {
	if addr == 0 {
		return unix.EFAULT
	}
	local := []unix.Iovec{{Base: &b[0], Len: uint64(len(b))}}
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	n, err := unix.ProcessVMReadv(int(t.n.PID), local, remote, 0)
	if err != nil || n != len(b) {
		return unix.EFAULT
	}
	return 0
}

// str reads a NUL-terminated string of at most PATH_MAX bytes at addr, a
// page at a time, so that a string ending just before an unmapped page
// still reads.
func (t *target) str(addr uint64) (string, unix.Errno) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	const page = 4096
	var out []byte
	for len(out) < unix.PathMax {
		n := page - int(addr%page)
		chunk := make([]byte, n)
		if e := t.mem(addr, chunk); e != 0 {
			return "", e
		}
		if i := strings.IndexByte(string(chunk), 0); i >= 0 {
			return string(append(out, chunk[:i]...)), 0
		}
		out = append(out, chunk...)
		addr += uint64(n)
	}
	return "", unix.ENAMETOOLONG
}

// connect connects the target's socket for it. A Unix socket by path must
// lie beneath the roots and is reached through the supervisor's O_PATH
// descriptor of it, so the path cannot change between the check and the
// connect; an abstract one is refused (the supervisor, outside the
// command's Landlock domain, would bypass its scoping); other families go
// through under network allow.
func (t *target) connect(fd int32, addr, size uint64) (int64, unix.Errno) {
	if size < 2 || size > unix.SizeofSockaddrAny {
		return 0, unix.EINVAL
	}
	raw := make([]byte, size)
	if e := t.mem(addr, raw); e != 0 {
		return 0, e
	}
	sock, e := t.fd(fd)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(sock)
	family := binary.NativeEndian.Uint16(raw)
	if family != unix.AF_UNIX {
		if t.m.netDeny || !t.valid() {
			return 0, unix.EACCES
		}
		return 0, rawConnect(sock, raw)
	}
	path := raw[2:]
	if i := strings.IndexByte(string(path), 0); i >= 0 {
		path = path[:i]
	}
	if len(path) == 0 {
		return 0, unix.EACCES // abstract (or unnamed): not through the supervisor
	}
	f, e := t.resolve(unix.AT_FDCWD, string(path), false)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(f)
	if e := t.check(f); e != 0 {
		return 0, e
	}
	return 0, errno(unix.Connect(sock, &unix.SockaddrUnix{Name: procFD(f)}))
}

func rawConnect(fd int, addr []byte) unix.Errno {
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&addr[0])), uintptr(len(addr)))
	return e
}

// flock locks the target's file for it (flock locks belong to the open
// file, which the supervisor's duplicate shares). A regular file or folder
// must lie beneath the roots; unlocking is always allowed.
func (t *target) flock(fd int32, how int) (int64, unix.Errno) {
	mine, e := t.fd(fd)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(mine)
	if how&unix.LOCK_UN == 0 {
		var st unix.Stat_t
		if err := unix.Fstat(mine, &st); err != nil {
			return 0, errno(err)
		}
		if k := st.Mode & unix.S_IFMT; k == unix.S_IFREG || k == unix.S_IFDIR {
			if e := t.check(mine); e != 0 {
				return 0, e
			}
		}
	}
	return 0, errno(unix.Flock(mine, how))
}

// ioctl sets inode flags (FS_IOC_SETFLAGS) or extended attributes
// (FS_IOC_FSSETXATTR) on the target's file when it lies beneath the roots.
func (t *target) ioctl(fd int32, cmd uint32, arg uint64) (int64, unix.Errno) {
	size := 4
	switch cmd {
	case fsIocSetflags, fsIoc32Setflags:
	case fsIocFssetxattr:
		size = 28 // sizeof(struct fsxattr)
	default:
		return 0, unix.ENOTTY
	}
	buf := make([]byte, size)
	if e := t.mem(arg, buf); e != 0 {
		return 0, e
	}
	return t.onFD(fd, func(f int, opath bool) unix.Errno {
		if opath {
			return unix.EBADF
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(f), uintptr(cmd), uintptr(unsafe.Pointer(&buf[0])))
		return e
	})
}

// utimes sets a file's times for the utime family: utime's and utimes'
// structures become utimensat's timespecs; a NULL time pointer means now.
func (t *target) utimes(op string, a [6]uint64) (int64, unix.Errno) {
	var (
		dirfd  int32 = unix.AT_FDCWD
		path   uint64
		times  uint64
		flags  int
		ts     *[2]unix.Timespec
		layout = op
	)
	switch op {
	case OpUtime, OpUtimes:
		path, times = a[0], a[1]
	case OpFutimesat:
		dirfd, path, times = int32(a[0]), a[1], a[2]
	case OpUtimensat:
		dirfd, path, times, flags = int32(a[0]), a[1], a[2], int(int32(a[3]))
		if flags&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
			return 0, unix.EINVAL
		}
	}
	if times != 0 {
		var b [32]byte
		n := 32
		if layout == OpUtime {
			n = 16
		}
		if e := t.mem(times, b[:n]); e != 0 {
			return 0, e
		}
		word := func(i int) int64 { return int64(binary.NativeEndian.Uint64(b[8*i:])) }
		ts = new([2]unix.Timespec)
		switch layout {
		case OpUtime: // struct utimbuf {actime, modtime}
			ts[0], ts[1] = unix.Timespec{Sec: word(0)}, unix.Timespec{Sec: word(1)}
		case OpUtimes, OpFutimesat: // struct timeval[2]
			for i := range 2 {
				usec := word(2*i + 1)
				if usec < 0 || usec >= 1e6 {
					return 0, unix.EINVAL
				}
				ts[i] = unix.Timespec{Sec: word(2 * i), Nsec: usec * 1000}
			}
		default: // struct timespec[2], UTIME_NOW and UTIME_OMIT passed on
			ts[0], ts[1] = unix.Timespec{Sec: word(0), Nsec: word(1)}, unix.Timespec{Sec: word(2), Nsec: word(3)}
		}
	}
	set := func(fd int, opath bool) unix.Errno {
		var tp uintptr
		if ts != nil {
			tp = uintptr(unsafe.Pointer(&ts[0]))
		}
		empty := [1]byte{}
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])), tp, unix.AT_EMPTY_PATH, 0, 0)
		return e
	}
	if path == 0 {
		// futimens and futimesat(fd, NULL, ...): the descriptor itself.
		if dirfd == unix.AT_FDCWD {
			return 0, unix.EFAULT
		}
		return t.onFD(dirfd, set)
	}
	return t.onPath(dirfd, path, flags&unix.AT_SYMLINK_NOFOLLOW != 0, flags&unix.AT_EMPTY_PATH != 0, set)
}

// maxXattr is the largest extended attribute value the kernel takes.
const maxXattr = 64 << 10

func (t *target) xattrName(addr uint64) (string, unix.Errno) {
	name, e := t.str(addr)
	if e == 0 && (name == "" || len(name) > 255) {
		e = unix.ERANGE
	}
	return name, e
}

func (t *target) setxattr(op string, a [6]uint64) (int64, unix.Errno) {
	name, e := t.xattrName(a[1])
	if e != 0 {
		return 0, e
	}
	if a[3] > maxXattr {
		return 0, unix.E2BIG
	}
	value := make([]byte, a[3])
	if len(value) > 0 {
		if e := t.mem(a[2], value); e != 0 {
			return 0, e
		}
	}
	flags := int(int32(a[4]))
	set := func(fd int, opath bool) unix.Errno {
		if !opath {
			return errno(unix.Fsetxattr(fd, name, value, flags))
		}
		if isSymlink(fd) {
			return unix.EPERM // user attributes are not allowed on symlinks; the others need capabilities
		}
		return errno(unix.Setxattr(procFD(fd), name, value, flags))
	}
	if op == OpFsetxattr {
		return t.onFD(int32(a[0]), set)
	}
	return t.onPath(unix.AT_FDCWD, a[0], op == OpLsetxattr, false, set)
}

func (t *target) removexattr(op string, a [6]uint64) (int64, unix.Errno) {
	name, e := t.xattrName(a[1])
	if e != 0 {
		return 0, e
	}
	remove := func(fd int, opath bool) unix.Errno {
		if !opath {
			return errno(unix.Fremovexattr(fd, name))
		}
		if isSymlink(fd) {
			return unix.EPERM
		}
		return errno(unix.Removexattr(procFD(fd), name))
	}
	if op == OpFremovexat {
		return t.onFD(int32(a[0]), remove)
	}
	return t.onPath(unix.AT_FDCWD, a[0], op == OpLremovexat, false, remove)
}

func isSymlink(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// errno is err's errno, EIO for anything else, 0 for nil.
func errno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(unix.Errno); ok {
		return e
	}
	return unix.EIO
}
