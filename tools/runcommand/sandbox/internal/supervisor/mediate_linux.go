package supervisor

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls the seccomp filter sends to the supervisor (user
// notification): what Landlock does not govern, or governs only by path.
//
//   - Changes of a file's metadata (mode, owner, times, extended
//     attributes, inode flags) and locks (flock, fcntl's record and
//     open-file locks): beneath the call's roots only (the workspace and
//     the call's TMPDIR). A lock needs only read access, so a read-only
//     file elsewhere could otherwise be locked against the host's lockers.
//   - Connecting and binding a socket: a Unix socket by path reaches any
//     listener on the host; one bound by absolute path would publish the
//     session's folder name in /proc/net/unix.
//   - What could hide files from the call's accounting: memfd_create and
//     O_TMPFILE (files born without a name), unlink and rename (a file
//     that loses its last name while open). The supervisor keeps a
//     reference to each such file while anything else holds it (the
//     ledger), so the watchdog measures it whoever holds it: a process
//     that is not dumpable, a memory mapping, a descriptor in flight in a
//     Unix socket.
//   - Watching a file or folder (inotify_add_watch): beneath the roots
//     only; a watch needs only read permission, which Landlock does not
//     check, and shows the names and accesses of what a folder holds.
//   - Starting a process or thread (clone, fork, vfork): refused past the
//     call's max_processes, before the uid's RLIMIT_NPROC.
//   - ioctls and fcntls outside the filter's allow-list that the
//     supervisor performs (inode flags, reflinks; locks).
//
// The supervisor performs each call itself, on its own copy of the
// arguments and of the descriptors involved, after checking that what it
// acts on lies beneath the roots, and never lets the original system call
// go on, so a thread of the command that rewrites the arguments meanwhile
// changes nothing. The exceptions are the calls it only counts or checks
// and cannot perform for the command (clone, fork and vfork; fcntl's
// process-owned record locks), which it lets continue: a clone's
// arguments are registers the filter has checked, and a record lock a
// racing thread moved onto a file outside is found by the watchdog in
// /proc/locks and ends the call. The supervisor has the command's uid and
// no capabilities, so the kernel's own checks still apply on top.

// Operations, the values of Setup.Notify.
const (
	OpConnect    = "connect"           // (fd, addr, len)
	OpBind       = "bind"              // (fd, addr, len)
	OpChmod      = "chmod"             // (path, mode)
	OpFchmod     = "fchmod"            // (fd, mode)
	OpFchmodat   = "fchmodat"          // (dirfd, path, mode)
	OpFchmodat2  = "fchmodat2"         // (dirfd, path, mode, flags)
	OpChown      = "chown"             // (path, uid, gid)
	OpLchown     = "lchown"            // (path, uid, gid)
	OpFchown     = "fchown"            // (fd, uid, gid)
	OpFchownat   = "fchownat"          // (dirfd, path, uid, gid, flags)
	OpUtime      = "utime"             // (path, *utimbuf)
	OpUtimes     = "utimes"            // (path, *timeval[2])
	OpFutimesat  = "futimesat"         // (dirfd, path, *timeval[2])
	OpUtimensat  = "utimensat"         // (dirfd, path, *timespec[2], flags)
	OpSetxattr   = "setxattr"          // (path, name, value, size, flags)
	OpLsetxattr  = "lsetxattr"         // (path, name, value, size, flags)
	OpFsetxattr  = "fsetxattr"         // (fd, name, value, size, flags)
	OpRemovexatt = "removexattr"       // (path, name)
	OpLremovexat = "lremovexattr"      // (path, name)
	OpFremovexat = "fremovexattr"      // (fd, name)
	OpIoctl      = "ioctl"             // (fd, one of MediatedIoctls, arg)
	OpFcntl      = "fcntl"             // (fd, one of MediatedFcntls, arg)
	OpFlock      = "flock"             // (fd, operation)
	OpClone      = "clone"             // (flags, ...): no namespace flags
	OpFork       = "fork"              // ()
	OpVfork      = "vfork"             // ()
	OpMemfd      = "memfd_create"      // (name, flags)
	OpOpen       = "open"              // (path, flags, mode): O_TMPFILE only
	OpOpenat     = "openat"            // (dirfd, path, flags, mode): O_TMPFILE only
	OpUnlink     = "unlink"            // (path)
	OpUnlinkat   = "unlinkat"          // (dirfd, path, flags): not AT_REMOVEDIR
	OpRename     = "rename"            // (old, new)
	OpRenameat   = "renameat"          // (olddirfd, old, newdirfd, new)
	OpRenameat2  = "renameat2"         // (olddirfd, old, newdirfd, new, flags)
	OpInotify    = "inotify_add_watch" // (fd, path, mask)
	OpFallocate  = "fallocate"         // (fd, mode, offset, len)
)

// Ioctl commands the filter sends to the supervisor, which performs them
// beneath the roots: inode flags (append-only, no-dump, ...), with
// FSSETXATTR project IDs too, and reflinks (cp's default).
const (
	fsIocSetflags   = unix.FS_IOC_SETFLAGS
	fsIoc32Setflags = 0x40046602 // FS_IOC32_SETFLAGS, the same with an int
	fsIocFssetxattr = 0x401c5820 // FS_IOC_FSSETXATTR, _IOW('X', 32, struct fsxattr)
	ficlone         = 0x40049409 // FICLONE, _IOW(0x94, 9, int): arg is the source descriptor
	ficlonerange    = 0x4020940d // FICLONERANGE, _IOW(0x94, 13, struct file_clone_range)
)

// MediatedIoctls are the ioctl commands the filter sends to the supervisor.
var MediatedIoctls = []uint32{fsIocSetflags, fsIoc32Setflags, fsIocFssetxattr, ficlone, ficlonerange}

// MediatedFcntls are the fcntl commands the filter sends to the
// supervisor: the locks. Open-file locks it takes itself (they belong to
// the open file, which its duplicate shares); record locks belong to the
// process, so it checks them and lets them continue.
var MediatedFcntls = []uint32{unix.F_SETLK, unix.F_SETLKW, unix.F_OFD_SETLK, unix.F_OFD_SETLKW}

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

// notifAddfd mirrors struct seccomp_notif_addfd.
type notifAddfd struct {
	ID         uint64
	Flags      uint32
	Srcfd      uint32
	Newfd      uint32
	NewfdFlags uint32
}

// mediator answers the notifications of one command's filter.
type mediator struct {
	fd      int            // the listener
	ops     map[int]string // system call number → operation
	roots   []string       // where it may act, symlinks resolved
	rootIDs [][2]uint64    // their device and inode numbers
	netDeny bool
	// minFree is the room a file system must keep (Spec.MinFreeBytes),
	// maxFile a file's largest size (RLIMIT_FSIZE): fallocate's bounds.
	minFree, maxFile uint64
	// allocating serializes fallocate's look at the room left and its
	// allocation, so two cannot both take the same room.
	allocating sync.Mutex

	// names serializes the calls that take a name away (unlink, rename),
	// so that no other one replaces the name between the supervisor's
	// look at the file it names and its removal: the file that loses its
	// name is the one the ledger gets. (Nothing else the command may do
	// replaces a name: creating fails on an existing one.)
	names  sync.Mutex
	ledger *ledger
	procs  *procLimit
	locks  lockGuard
	busy   sync.WaitGroup // answers in flight
	// slots bounds the answers at work at once (answerSlots), each on a
	// thread it holds (see answer).
	slots chan struct{}
	// lockWaits counts the locks waitLock waits for now.
	lockWaits atomic.Int64
	// receive is how serve takes notifications (Exit.Receive), once it
	// has chosen.
	receive atomic.Value
}

func newMediator(fd int, setup Setup, sp Spec, l *ledger, p *procLimit) *mediator {
	m := &mediator{fd: fd, ops: setup.Notify, roots: sp.Roots, netDeny: setup.NetworkDeny, ledger: l, procs: p,
		minFree: sp.MinFreeBytes, maxFile: setup.Limits.MaxFileBytes}
	for _, r := range sp.Roots {
		var st unix.Stat_t
		if unix.Stat(r, &st) == nil {
			m.rootIDs = append(m.rootIDs, [2]uint64{st.Dev, st.Ino})
		}
	}
	m.locks.approved = map[[2]uint64]bool{}
	m.slots = make(chan struct{}, answerSlots)
	return m
}

// serve takes notifications until the listener fails (no process is left
// under the filter, or the supervisor is exiting), answering each on a
// goroutine of its own: an operation such as connect may block. It closes
// the listener when it returns.
//
// How soon it takes one matters as much as the answer. Until the
// supervisor has received a notification, the kernel lets any signal the
// caller catches interrupt its wait (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
// protects it only from then on), and the system call then fails with
// EINTR unless the handler has SA_RESTART: a fork, an unlink or a chmod,
// which never fail so natively, and which callers do not retry. dash's
// SIGCHLD handler has no SA_RESTART, so in "a | b" the first child's exit,
// landing while the second fork waited to be received, made the shell say
// "Cannot fork" (about one pipeline in a hundred on a loaded machine). So
// serve receives in a system call of its own thread, which the kernel
// wakes on the caller's CPU as the caller goes to sleep (receiveBlocking);
// only where the kernel cannot do that (before Linux 6.6) does it wait in
// the runtime's poller, whose wake-up goes through the Go scheduler first.
func (m *mediator) serve() {
	if m.receiveBlocking() {
		return
	}
	m.receive.Store(ReceivePoller)
	// Non-blocking before os.NewFile, which then puts it in the poller.
	err := unix.SetNonblock(m.fd, true)
	f := os.NewFile(uintptr(m.fd), "seccomp-listener")
	defer f.Close()
	if err != nil {
		return
	}
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
			m.busy.Add(1)
			go m.answer(n)
		case e == unix.EINTR || e == unix.ENOENT: // interrupted, or the caller went before it was taken
		default:
			return
		}
	}
}

// receiveBlocking takes notifications in SECCOMP_IOCTL_NOTIF_RECV, blocked
// in the kernel on a thread of its own, until no process is left under the
// filter; it reports false, having taken none, where the kernel lacks
// SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (Linux 6.6, which also ends a blocked
// receive when the filter's last process is gone; before it, a receive
// would wait forever then). With that flag a notification wakes this
// thread on the caller's CPU just as the caller sleeps, so it is received
// within microseconds, without the Go scheduler between; the supervisor
// runs on two Ps, so that this thread's system call holds none the
// answers need.
func (m *mediator) receiveBlocking() bool {
	if unix.SetNonblock(m.fd, false) != nil {
		return false
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(m.fd), unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP); e != 0 {
		return false
	}
	m.receive.Store(ReceiveBlocking)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer unix.Close(m.fd)
	for {
		var n notif
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(m.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
		switch e {
		case 0:
			m.busy.Add(1)
			go m.answer(n)
		case unix.EINTR:
		case unix.ENOENT:
			// The caller went before it was taken (killed, or a signal
			// interrupted its wait), or none is left: the filter has no
			// process, and the listener says so.
			if hungUp(m.fd) {
				return true
			}
		default:
			return true
		}
	}
}

// hungUp reports whether the listener fd says no process is left under its
// filter.
func hungUp(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(pfd, 0)
		if err != unix.EINTR {
			return err != nil || pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 && pfd[0].Revents&unix.POLLIN == 0
		}
	}
}

// dropThreadCapabilities leaves the calling (locked) thread without
// capabilities: the server's may linger on threads the runtime started
// before the supervisor dropped its own.
func dropThreadCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	return unix.Capset(&hdr, &none[0])
}

// answerSlots is how many answers may be at work at once. Each holds a
// thread of its own while at work (it drops the thread's capabilities),
// and the Go runtime keeps every thread it ever started: answers at work
// at once, however the scheduler happened to run them (a burst of a
// command's notifications on a loaded machine), would become threads of
// the supervisor's uid, counted by no limit, kept for its next commands.
// Two Ps run them; more slots than a few would only let more threads be
// made. A connect may wait as long as its peer lets it, so it takes no
// slot (it holds its own thread while it waits).
const answerSlots = 8

func (m *mediator) answer(n notif) {
	defer m.busy.Done()
	if m.ops[int(n.NR)] != OpConnect {
		m.slots <- struct{}{}
		defer func() { <-m.slots }()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := dropThreadCapabilities(); err != nil {
		m.reply(notifResp{ID: n.ID, Val: -1, Error: -int32(unix.EPERM)})
		return
	}
	val, errno := m.handle(&n)
	r := notifResp{ID: n.ID, Val: val}
	switch {
	case errno == goOn:
		r.Val, r.Flags = 0, unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	case errno != 0:
		r.Val, r.Error = -1, -int32(errno)
	}
	m.reply(r)
}

// goOn, as handle's errno, lets the system call continue in the kernel.
const goOn = unix.Errno(^uintptr(0) >> 1)

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
	a := n.Args
	switch op {
	case OpClone, OpFork, OpVfork:
		// Counted, not performed: the filter checked clone's flags (in
		// registers, which no other thread can change).
		if m.procs.allow(int(n.PID), int(n.NR)) {
			return 0, goOn
		}
		return 0, unix.EAGAIN
	}
	pidfd, err := openTask(int(n.PID))
	if err != nil {
		return 0, unix.ESRCH
	}
	defer unix.Close(pidfd)
	t := &target{m: m, n: n, pidfd: pidfd}
	switch op {
	case OpConnect:
		return t.connect(int32(a[0]), a[1], a[2])
	case OpBind:
		return t.bind(int32(a[0]), a[1], a[2])
	case OpFlock:
		return t.flock(int32(a[0]), int(int32(a[1])))
	case OpIoctl:
		return t.ioctl(int32(a[0]), uint32(a[1]), a[2])
	case OpFcntl:
		return t.fcntl(int32(a[0]), int(int32(a[1])), a[2])
	case OpMemfd:
		return t.memfd(a[0], uint(uint32(a[1])))
	case OpOpen:
		return t.tmpfile(unix.AT_FDCWD, a[0], int(int32(a[1])), uint32(a[2]))
	case OpOpenat:
		return t.tmpfile(int32(a[0]), a[1], int(int32(a[2])), uint32(a[3]))
	case OpUnlink:
		return t.unlink(unix.AT_FDCWD, a[0], 0)
	case OpUnlinkat:
		return t.unlink(int32(a[0]), a[1], int(int32(a[2])))
	case OpRename:
		return t.rename(unix.AT_FDCWD, a[0], unix.AT_FDCWD, a[1], 0)
	case OpRenameat:
		return t.rename(int32(a[0]), a[1], int32(a[2]), a[3], 0)
	case OpRenameat2:
		return t.rename(int32(a[0]), a[1], int32(a[2]), a[3], uint(uint32(a[4])))
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
	case OpInotify:
		return t.inotifyAddWatch(int32(a[0]), a[1], uint32(a[2]))
	case OpFallocate:
		return t.fallocate(int32(a[0]), uint32(a[1]), int64(a[2]), int64(a[3]))
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
	fd, e := t.resolve(dirfd, path, nofollow, false)
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
// a file from elsewhere in. A folder nested too deep for that name
// (PATH_MAX) is followed up through its parents instead; any other file
// that deep is refused.
func (m *mediator) beneath(fd int) bool {
	p, err := os.Readlink(procFD(fd))
	if err == nil {
		for _, r := range m.roots {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	return m.beneathUp(fd)
}

// maxClimb bounds how many parents beneathUp follows.
const maxClimb = 1 << 16

// beneathUp reports whether the folder dir lies beneath a root, following
// its parents ("..") until one is a root or the file system's root. A
// folder beneath the roots stays beneath them: the command can move it
// only within them.
func (m *mediator) beneathUp(dir int) bool {
	cur, err := unix.Openat(dir, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer func() { unix.Close(cur) }()
	var st unix.Stat_t
	for range maxClimb {
		if unix.Fstat(cur, &st) != nil {
			return false
		}
		for _, id := range m.rootIDs {
			if id == [2]uint64{st.Dev, st.Ino} {
				return true
			}
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false
		}
		var ust unix.Stat_t
		if unix.Fstat(up, &ust) != nil || (ust.Dev == st.Dev && ust.Ino == st.Ino) {
			unix.Close(up)
			return false // the file system's root
		}
		unix.Close(cur)
		cur = up
	}
	return false
}

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// base opens what the target resolves a relative path from: its working
// folder for AT_FDCWD, else its descriptor dirfd. The caller closes it.
func (t *target) base(dirfd int32) (int, unix.Errno) {
	if dirfd == unix.AT_FDCWD {
		fd, err := unix.Open("/proc/"+strconv.Itoa(int(t.n.PID))+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, unix.EACCES // gone, or not dumpable: its working folder is out of reach
		}
		return fd, 0
	}
	return t.fd(dirfd)
}

// resolve opens (O_PATH) what path names from the target's dirfd (its
// working folder for AT_FDCWD), following symlinks unless nofollow, and
// refusing magic links such as /proc/self/fd/N, which would resolve in the
// supervisor rather than in the target. dir asks for a folder.
func (t *target) resolve(dirfd int32, path string, nofollow, dir bool) (int, unix.Errno) {
	base := unix.AT_FDCWD
	if !strings.HasPrefix(path, "/") {
		var e unix.Errno
		if base, e = t.base(dirfd); e != 0 {
			return -1, e
		}
		defer unix.Close(base)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if nofollow {
		how.Flags |= unix.O_NOFOLLOW
	}
	if dir {
		how.Flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Openat2(base, path, &how)
	if err != nil {
		return -1, errno(err)
	}
	return fd, 0
}

// parent resolves the folder that holds what path names (from the
// target's dirfd) and checks it lies beneath the roots; name is the last
// component, with its trailing slash if it had one, which the kernel's
// own call then judges ("." and ".." are never removed or renamed).
func (t *target) parent(dirfd int32, path string) (int, string, unix.Errno) {
	if path == "" {
		return -1, "", unix.ENOENT
	}
	dir, name := splitPath(path)
	fd, e := t.resolve(dirfd, dir, false, true)
	if e != 0 {
		return -1, "", e
	}
	if !t.m.beneath(fd) {
		unix.Close(fd)
		return -1, "", unix.EACCES
	}
	return fd, name, 0
}

// splitPath splits path into the folder that holds its last component and
// that component: "a/b/c" → "a/b", "c"; "c" → ".", "c"; "/c" → "/", "c";
// "a/b/" → "a", "b/"; "/" → "/", ".".
func splitPath(path string) (dir, name string) {
	trimmed := strings.TrimRight(path, "/")
	slash := ""
	if len(trimmed) < len(path) {
		slash = "/"
	}
	if trimmed == "" {
		return "/", "."
	}
	i := strings.LastIndexByte(trimmed, '/')
	switch {
	case i < 0:
		return ".", trimmed + slash
	case i == 0:
		return "/", trimmed[1:] + slash
	}
	return trimmed[:i], trimmed[i+1:] + slash
}

// fd duplicates the target's descriptor n into the supervisor.
func (t *target) fd(n int32) (int, unix.Errno) {
	if n < 0 {
		return -1, unix.EBADF
	}
	fd, err := unix.PidfdGetfd(t.pidfd, int(n), 0)
	switch {
	case err == unix.EBADF:
		return -1, unix.EBADF
	case err == unix.EPERM:
		return -1, unix.EACCES // not dumpable: its descriptors are out of reach
	case err != nil:
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
	switch {
	case err == unix.EPERM:
		return unix.EACCES // not dumpable: its memory is out of reach
	case err != nil || n != len(b):
		return unix.EFAULT
	}
	return 0
}

// str reads a NUL-terminated string of at most PATH_MAX bytes at addr.
func (t *target) str(addr uint64) (string, unix.Errno) { return t.strMax(addr, unix.PathMax) }

// strMax reads a NUL-terminated string of at most max bytes at addr, a
// page at a time, so that a string ending just before an unmapped page
// still reads.
func (t *target) strMax(addr uint64, max int) (string, unix.Errno) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	const page = 4096
	var out []byte
	for len(out) < max {
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

// umask is the target's file mode creation mask.
func (t *target) umask() int {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(int(t.n.PID)) + "/status")
	if i := strings.Index(string(status), "Umask:"); err == nil && i >= 0 {
		f := strings.Fields(string(status[i+len("Umask:"):]))
		if len(f) > 0 {
			if m, err := strconv.ParseUint(f[0], 8, 32); err == nil {
				return int(m)
			}
		}
	}
	return 0o022
}

// inOwnFolder runs f on a thread of its own, with no capabilities and a
// working folder and umask of its own (unshare CLONE_FS), which f may
// change: the thread ends with it.
func inOwnFolder(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes when this goroutine ends
		if err := dropThreadCapabilities(); err != nil {
			errc <- err
			return
		}
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// addfd installs fd into the target, as the system call's result.
func (t *target) addfd(fd int, cloexec bool) (int64, unix.Errno) {
	a := notifAddfd{ID: t.n.ID, Srcfd: uint32(fd)}
	if cloexec {
		a.NewfdFlags = unix.O_CLOEXEC
	}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.m.fd), unix.SECCOMP_IOCTL_NOTIF_ADDFD, uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		if e == unix.EINVAL || e == unix.ENOTTY { // before Linux 5.9
			return 0, unix.ENOSYS
		}
		return 0, e
	}
	return int64(r), 0
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
		return 0, rawSockaddr(unix.SYS_CONNECT, sock, raw)
	}
	path := raw[2:]
	if i := strings.IndexByte(string(path), 0); i >= 0 {
		path = path[:i]
	}
	if len(path) == 0 {
		return 0, unix.EACCES // abstract (or unnamed): not through the supervisor
	}
	f, e := t.resolve(unix.AT_FDCWD, string(path), false, false)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(f)
	if e := t.check(f); e != 0 {
		return 0, e
	}
	return 0, errno(unix.Connect(sock, &unix.SockaddrUnix{Name: procFD(f)}))
}

// bind binds the target's socket for it. A Unix socket by path is made in
// its folder (beneath the roots) under its last name only, bound from that
// folder as working folder, so that the name the kernel keeps, which every
// process reads in /proc/net/unix, holds no folder (a session's folder
// name among them). An abstract address is refused: no process of the
// command can connect to it (connect refuses abstract addresses), so only
// processes outside the sandbox could, and a command could squat a name a
// host service uses and take its clients' connections, as a TCP listener
// would. An unnamed address (autobind, a name the kernel picks) goes
// through; other families go through under network allow.
func (t *target) bind(fd int32, addr, size uint64) (int64, unix.Errno) {
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
		return 0, rawSockaddr(unix.SYS_BIND, sock, raw)
	}
	path := raw[2:]
	if len(path) == 0 {
		return 0, rawSockaddr(unix.SYS_BIND, sock, raw) // autobind
	}
	if path[0] == 0 {
		return 0, unix.EACCES // abstract
	}
	if i := strings.IndexByte(string(path), 0); i >= 0 {
		path = path[:i]
	}
	dir, name, e := t.parent(unix.AT_FDCWD, string(path))
	if e != 0 {
		return 0, e
	}
	defer unix.Close(dir)
	umask := t.umask()
	if !t.valid() {
		return 0, unix.ESRCH
	}
	err := inOwnFolder(func() error {
		if err := unix.Fchdir(dir); err != nil {
			return err
		}
		syscall.Umask(umask)
		return unix.Bind(sock, &unix.SockaddrUnix{Name: name})
	})
	return 0, errno(err)
}

// inotifyAddWatch adds the target's watch to its inotify instance for it,
// on a file or folder beneath the roots only. Landlock does not govern
// watches (a watch needs only the read permission the uid has), so a
// command could otherwise watch the folder holding the sessions' folders,
// learn a new session's folder name, and watch it: every name another
// session's files get, and when each is read or written.
func (t *target) inotifyAddWatch(fd int32, addr uint64, mask uint32) (int64, unix.Errno) {
	path, e := t.str(addr)
	if e != 0 {
		return 0, e
	}
	in, e := t.fd(fd)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(in)
	f, e := t.resolve(unix.AT_FDCWD, path, mask&unix.IN_DONT_FOLLOW != 0, mask&unix.IN_ONLYDIR != 0)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(f)
	if e := t.check(f); e != 0 {
		return 0, e
	}
	// Through the descriptor's link, which names what was resolved (a
	// symlink itself under IN_DONT_FOLLOW, which must not apply to the
	// link in /proc).
	wd, err := unix.InotifyAddWatch(in, procFD(f), mask&^unix.IN_DONT_FOLLOW)
	return int64(wd), errno(err)
}

// rawSockaddr makes connect or bind (call) with an address as the target
// gave it.
func rawSockaddr(call uintptr, fd int, addr []byte) unix.Errno {
	_, _, e := unix.Syscall(call, uintptr(fd), uintptr(unsafe.Pointer(&addr[0])), uintptr(len(addr)))
	return e
}

// lockable checks a file the target locks: a regular file or folder must
// lie beneath the roots (a lock needs only read access); other kinds
// (pipes, sockets, devices) are the command's own business.
func (t *target) lockable(fd int) (st unix.Stat_t, e unix.Errno) {
	if err := unix.Fstat(fd, &st); err != nil {
		return st, errno(err)
	}
	if k := st.Mode & unix.S_IFMT; k == unix.S_IFREG || k == unix.S_IFDIR {
		return st, t.check(fd)
	}
	return st, 0
}

// fallocate allocates for the target, on its descriptor, unless the
// allocation could leave the file system short of the room the server
// keeps (ENOSPC, as a full disk says) or make the file larger than
// max_file_bytes (EFBIG and SIGXFSZ, as the kernel does under
// RLIMIT_FSIZE, which binds the supervisor's own call no more). Writes
// fill a disk at the speed of the disk, between the watchdog's samples;
// fallocate took a gigabyte per call at once (two in a 40 ms command, past
// workspace_min_free_bytes before the first sample). Punching or
// collapsing a range frees room and goes through.
func (t *target) fallocate(fd int32, mode uint32, off, size int64) (int64, unix.Errno) {
	mine, e := t.fd(fd)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(mine)
	if off < 0 || size <= 0 {
		return 0, unix.EINVAL
	}
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_COLLAPSE_RANGE) == 0 {
		if mode&unix.FALLOC_FL_KEEP_SIZE == 0 && t.m.maxFile > 0 && uint64(off)+uint64(size) > t.m.maxFile {
			_ = unix.PidfdSendSignal(t.pidfd, unix.SIGXFSZ, nil, 0)
			return 0, unix.EFBIG
		}
		t.m.allocating.Lock()
		defer t.m.allocating.Unlock()
		if t.m.minFree > 0 {
			var st unix.Statfs_t
			if err := unix.Fstatfs(mine, &st); err != nil {
				return 0, errno(err)
			}
			if free := st.Bavail * uint64(st.Bsize); free < t.m.minFree || free-t.m.minFree < uint64(size) {
				return 0, unix.ENOSPC
			}
		}
	}
	return 0, errno(unix.Fallocate(mine, mode, off, size))
}

// flock locks the target's file for it (flock locks belong to the open
// file, which the supervisor's duplicate shares). Unlocking is always
// allowed. A lock the target waits for is waited for by waitLock.
func (t *target) flock(fd int32, how int) (int64, unix.Errno) {
	mine, e := t.fd(fd)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(mine)
	if how&unix.LOCK_UN == 0 {
		if _, e := t.lockable(mine); e != 0 {
			return 0, e
		}
	}
	if how&(unix.LOCK_UN|unix.LOCK_NB) == 0 {
		return 0, t.waitLock(func() unix.Errno {
			return errno(unix.Flock(mine, how|unix.LOCK_NB)) // EWOULDBLOCK is EAGAIN
		})
	}
	return 0, errno(unix.Flock(mine, how))
}

// Between two attempts at a lock held elsewhere, waitLock waits at first
// lockRetryMin, twice as long after each attempt, up to lockRetryMax: how
// late a waiter may take a lock after it is let go, and how late a signal
// interrupts the wait. Past lockRetryWaits waits at once, the longest
// pause grows with their number, so that the attempts of however many
// cost the supervisor (and the call's cpu_seconds) no more than those of
// lockRetryWaits (on the shared 2-core machine at a load of 5-8, 64 waits
// cost it 0.03 s of CPU a second, 900 waits 0.18 s).
const (
	lockRetryMin   = time.Millisecond
	lockRetryMax   = 100 * time.Millisecond
	lockRetryWaits = 32
)

// waitLock waits for a lock the target asked to wait for (flock without
// LOCK_NB, F_OFD_SETLKW), taking it with try, which makes one attempt
// without waiting (EAGAIN: held elsewhere). Between attempts it holds no
// thread of the supervisor: a blocking lock held one each, which the Go
// runtime replaced to go on serving and kept once idle, so the waiting
// threads of one command (up to max_processes) made as many threads of the
// supervisor's uid, counted by no limit, and a warm supervisor kept them
// for its next commands (900 waits left 911 threads). And it gives up, as
// the kernel's wait would, when a signal the target catches is pending for
// it (EINTR: flock -w and alarm-bounded waits; the filter makes the
// target's own wait for the answer killable only), or when the target is
// gone.
func (t *target) waitLock(try func() unix.Errno) unix.Errno {
	e := try()
	if e != unix.EAGAIN {
		return e
	}
	// Nothing below needs the thread answer locked (no capability, no
	// working folder): give it back while waiting, and lock one again
	// for answer's deferred unlock.
	runtime.UnlockOSThread()
	defer runtime.LockOSThread()
	t.m.lockWaits.Add(1)
	defer t.m.lockWaits.Add(-1)
	for wait := lockRetryMin; ; {
		// Its slot too, between attempts: waits hold neither.
		<-t.m.slots
		time.Sleep(wait)
		t.m.slots <- struct{}{}
		wait = min(2*wait, lockRetryMax*time.Duration(max(1, t.m.lockWaits.Load()/lockRetryWaits)))
		if !t.valid() {
			return unix.ESRCH // killed: the answer goes nowhere
		}
		if e := try(); e != unix.EAGAIN {
			return e
		}
		if signalPending(int(t.n.PID)) {
			return unix.EINTR
		}
	}
}

// signalPending reports whether thread tid has a signal pending that it
// neither blocks nor leaves to the default action: one that would
// interrupt a system call it waits in. A signal to the thread counts; one
// to its process counts for the process's first thread only, which the
// kernel offers such a signal first: it interrupts one waiting thread, not
// every one (when the first thread blocks the signal, the kernel picks
// another, whose wait this lets go on). A fatal one kills the thread
// instead, which valid sees.
func signalPending(tid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return false
	}
	field := func(key string, base int) uint64 {
		i := bytes.Index(b, []byte("\n"+key+":"))
		if i < 0 {
			return 0
		}
		f := strings.Fields(string(b[i+len(key)+2 : min(len(b), i+len(key)+2+32)]))
		if len(f) == 0 {
			return 0
		}
		v, _ := strconv.ParseUint(f[0], base, 64)
		return v
	}
	pending := field("SigPnd", 16)
	if field("Tgid", 10) == uint64(tid) {
		pending |= field("ShdPnd", 16)
	}
	return pending&^field("SigBlk", 16)&field("SigCgt", 16) != 0
}

// fcntl takes the locks of fcntl. Open-file locks (F_OFD_*) belong to the
// open file, which the supervisor's duplicate shares, so it takes them
// itself. Record locks (F_SETLK, F_SETLKW) belong to the process, so the
// supervisor checks them and lets them continue: a read lock only on a
// file that may be locked (lockable), whose inode it approves; unlocks
// and write locks (which need a descriptor open for writing, so a file
// beneath the roots) as they are. Should a racing thread turn the call
// into a read lock on a file outside, the watchdog finds it in
// /proc/locks (not approved) and ends the call.
func (t *target) fcntl(fd int32, cmd int, arg uint64) (int64, unix.Errno) {
	var fl unix.Flock_t
	b := unsafe.Slice((*byte)(unsafe.Pointer(&fl)), unsafe.Sizeof(fl))
	if e := t.mem(arg, b); e != 0 {
		return 0, e
	}
	switch cmd {
	case unix.F_OFD_SETLK, unix.F_OFD_SETLKW:
		mine, e := t.fd(fd)
		if e != 0 {
			return 0, e
		}
		defer unix.Close(mine)
		if fl.Type != unix.F_UNLCK {
			if _, e := t.lockable(mine); e != 0 {
				return 0, e
			}
		}
		if cmd == unix.F_OFD_SETLKW && fl.Type != unix.F_UNLCK {
			return 0, t.waitLock(func() unix.Errno {
				if err := unix.FcntlFlock(uintptr(mine), unix.F_OFD_SETLK, &fl); err != unix.EACCES {
					return errno(err)
				}
				return unix.EAGAIN // held elsewhere, as EACCES
			})
		}
		return 0, errno(unix.FcntlFlock(uintptr(mine), cmd, &fl))
	case unix.F_SETLK, unix.F_SETLKW:
		if fl.Type != unix.F_RDLCK {
			t.m.locks.used.Store(true)
			return 0, goOn
		}
		mine, e := t.fd(fd)
		if e != 0 {
			return 0, e
		}
		defer unix.Close(mine)
		st, e := t.lockable(mine)
		if e != 0 {
			return 0, e
		}
		t.m.locks.approve(st.Dev, st.Ino)
		return 0, goOn
	}
	return 0, unix.EINVAL
}

// lockGuard is what the mediator let through of record locks.
type lockGuard struct {
	used     atomic.Bool // a record lock went on: the watchdog checks /proc/locks
	mu       sync.Mutex
	approved map[[2]uint64]bool // the files read locks were checked on
}

func (g *lockGuard) approve(dev, ino uint64) {
	g.used.Store(true)
	g.mu.Lock()
	g.approved[[2]uint64{dev, ino}] = true
	g.mu.Unlock()
}

func (g *lockGuard) ok(major, minor uint32, ino uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.approved[[2]uint64{unix.Mkdev(major, minor), ino}]
}

// ioctl performs the ioctls the filter sends (MediatedIoctls) on the
// target's file when it lies beneath the roots: inode flags
// (FS_IOC_SETFLAGS) and extended attributes (FS_IOC_FSSETXATTR), and
// reflinks into it (FICLONE, FICLONERANGE) from any file the target may
// read.
func (t *target) ioctl(fd int32, cmd uint32, arg uint64) (int64, unix.Errno) {
	var buf []byte
	switch cmd {
	case fsIocSetflags, fsIoc32Setflags:
		buf = make([]byte, 4)
	case fsIocFssetxattr:
		buf = make([]byte, 28) // sizeof(struct fsxattr)
	case ficlone:
		src, e := t.fd(int32(arg))
		if e != 0 {
			return 0, e
		}
		defer unix.Close(src)
		return t.onFD(fd, func(f int, opath bool) unix.Errno {
			if opath {
				return unix.EBADF
			}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(f), ficlone, uintptr(src))
			return e
		})
	case ficlonerange:
		var r unix.FileCloneRange
		if e := t.mem(arg, unsafe.Slice((*byte)(unsafe.Pointer(&r)), unsafe.Sizeof(r))); e != 0 {
			return 0, e
		}
		src, e := t.fd(int32(r.Src_fd))
		if e != 0 {
			return 0, e
		}
		defer unix.Close(src)
		r.Src_fd = int64(src)
		return t.onFD(fd, func(f int, opath bool) unix.Errno {
			if opath {
				return unix.EBADF
			}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(f), ficlonerange, uintptr(unsafe.Pointer(&r)))
			return e
		})
	default:
		return 0, unix.EPERM
	}
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

// memfd makes the target's memfd: the supervisor makes it, installs it in
// the target and keeps it in the ledger, which measures it (its pages
// count against max_workspace_bytes and memory_bytes, mapped or not)
// whoever holds it until nothing else does. The target gets the memfd
// opened again (through /proc, as any process may), not the open file
// memfd_create made: that one the kernel does not count among the
// file's opens, which the ledger's lease check must see.
func (t *target) memfd(addr uint64, flags uint) (int64, unix.Errno) {
	name, e := t.strMax(addr, 250)
	if e != 0 {
		if e == unix.ENAMETOOLONG {
			e = unix.EINVAL
		}
		return 0, e
	}
	if t.m.ledger.full() {
		return 0, unix.EMFILE
	}
	made, err := unix.MemfdCreate(name, int(flags)|unix.MFD_CLOEXEC)
	if err != nil {
		return 0, errno(err)
	}
	defer unix.Close(made)
	fd, err := unix.Open(procFD(made), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, errno(err)
	}
	defer unix.Close(fd)
	newfd, e := t.addfd(fd, flags&unix.MFD_CLOEXEC != 0)
	if e != 0 {
		return 0, e
	}
	t.m.ledger.add(made, true)
	return newfd, 0
}

// tmpfile opens the target's O_TMPFILE file (a file with no name, in the
// folder path names, beneath the roots): the supervisor makes it with
// the target's umask, installs it in the target and keeps it in the
// ledger. Set-ID modes are refused, as the filter refuses them on every
// open.
func (t *target) tmpfile(dirfd int32, addr uint64, flags int, mode uint32) (int64, unix.Errno) {
	if mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		return 0, unix.EPERM
	}
	path, e := t.str(addr)
	if e != 0 {
		return 0, e
	}
	dir, e := t.resolve(dirfd, path, flags&unix.O_NOFOLLOW != 0, true)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(dir)
	if e := t.check(dir); e != 0 {
		return 0, e
	}
	if t.m.ledger.full() {
		return 0, unix.EMFILE
	}
	umask := t.umask()
	fd := -1
	err := inOwnFolder(func() error {
		syscall.Umask(umask)
		var err error
		fd, err = unix.Openat(dir, ".", flags|unix.O_CLOEXEC, mode)
		return err
	})
	if err != nil {
		return 0, errno(err)
	}
	defer unix.Close(fd)
	newfd, e := t.addfd(fd, flags&unix.O_CLOEXEC != 0)
	if e != 0 {
		return 0, e
	}
	t.m.ledger.add(fd, false)
	return newfd, 0
}

// unlink removes a name for the target (unlink, unlinkat without
// AT_REMOVEDIR) from a folder beneath the roots. A regular file that
// loses its last name while something holds it open goes to the ledger.
func (t *target) unlink(dirfd int32, addr uint64, flags int) (int64, unix.Errno) {
	if flags&^unix.AT_REMOVEDIR != 0 {
		return 0, unix.EINVAL
	}
	path, e := t.str(addr)
	if e != 0 {
		return 0, e
	}
	dir, name, e := t.parent(dirfd, path)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(dir)
	if !t.valid() {
		return 0, unix.ESRCH
	}
	t.m.names.Lock()
	defer t.m.names.Unlock()
	victim, _ := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	err := unix.Unlinkat(dir, name, flags)
	t.m.lost(victim, err == nil)
	return 0, errno(err)
}

// rename renames for the target (rename, renameat, renameat2) between
// folders beneath the roots. A regular file the rename replaces that
// loses its last name while something holds it open goes to the ledger.
func (t *target) rename(olddirfd int32, oldaddr uint64, newdirfd int32, newaddr uint64, flags uint) (int64, unix.Errno) {
	oldpath, e := t.str(oldaddr)
	if e != 0 {
		return 0, e
	}
	newpath, e := t.str(newaddr)
	if e != 0 {
		return 0, e
	}
	odir, oname, e := t.parent(olddirfd, oldpath)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(odir)
	ndir, nname, e := t.parent(newdirfd, newpath)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(ndir)
	if !t.valid() {
		return 0, unix.ESRCH
	}
	t.m.names.Lock()
	defer t.m.names.Unlock()
	victim := -1
	if flags&unix.RENAME_EXCHANGE == 0 {
		victim, _ = unix.Openat(ndir, nname, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	err := unix.Renameat2(odir, oname, ndir, nname, flags)
	t.m.lost(victim, err == nil)
	return 0, errno(err)
}

// lost takes victim (an O_PATH descriptor of what a name named, or -1)
// after the name went (gone): a regular file left with no name that
// something still holds goes to the ledger; otherwise it is closed.
func (m *mediator) lost(victim int, gone bool) {
	if victim < 0 {
		return
	}
	var st unix.Stat_t
	if !gone || unix.Fstat(victim, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink > 0 || release(victim) {
		unix.Close(victim)
		return
	}
	m.ledger.keep(victim, false)
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
