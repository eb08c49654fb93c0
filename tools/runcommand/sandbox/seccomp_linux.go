package sandbox

import (
	"os"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox/internal/supervisor"
)

// denied are the system calls a tool command never needs, after Docker's
// default profile and Codex's Linux sandbox: debugging other processes
// (ptrace altogether: the supervisor needs none), mounts and namespaces,
// kernel keyrings, BPF, perf, modules, kexec, reboot, swap, clocks,
// io_uring (whose operations seccomp cannot see), stealing file
// descriptors, and POSIX message queues. They fail with EPERM.
var denied = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
	"sethostname", "setdomainname", "vhangup", "iopl", "ioperm", "uselib", "ustat", "sysfs",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "nfsservctl",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"tkill",        // signals a thread by ID alone, which could be the supervisor's; tgkill is checked below
	"memfd_secret", // memory no watchdog can measure (and, where enabled, no one can read)
	// POSIX message queues: kernel objects shared by a uid that outlive
	// the call and count against its RLIMIT_MSGQUEUE (a few queues exhaust
	// it) and the machine's queues_max; Landlock refuses the open that
	// follows mq_open's creation, not the creation, and not mq_unlink of
	// any queue of the uid.
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
	// fanotify marks, like inotify watches, need only read permission,
	// which Landlock does not check; inotify's go to the supervisor.
	"fanotify_init", "fanotify_mark",
}

// sysvIPC are System V IPC's system calls: its objects are shared by every
// process of a uid, outlive the call and are counted in no process's
// memory, so they are denied unless sandbox.sysv_ipc.
var sysvIPC = []string{"shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl"}

// mediated are the system calls the filter sends to the supervisor
// whatever their arguments (package supervisor, mediate): what Landlock
// does not govern (metadata, Unix sockets by path, locks, watches), what could hide
// files from the call's accounting (memfds, names taken away), what
// allocates disk at once (fallocate), and
// processes made past the call's share. The guard sends others depending
// on their arguments: clone (without namespace flags), unlinkat (not of a
// folder), open and openat (O_TMPFILE), and the ioctls and fcntls of
// supervisor.MediatedIoctls and MediatedFcntls.
var mediated = []string{
	supervisor.OpConnect, supervisor.OpBind, supervisor.OpFlock,
	supervisor.OpChmod, supervisor.OpFchmod, supervisor.OpFchmodat, supervisor.OpFchmodat2,
	supervisor.OpChown, supervisor.OpLchown, supervisor.OpFchown, supervisor.OpFchownat,
	supervisor.OpUtime, supervisor.OpUtimes, supervisor.OpFutimesat, supervisor.OpUtimensat,
	supervisor.OpSetxattr, supervisor.OpLsetxattr, supervisor.OpFsetxattr,
	supervisor.OpRemovexatt, supervisor.OpLremovexat, supervisor.OpFremovexat,
	supervisor.OpMemfd, supervisor.OpUnlink, supervisor.OpRename, supervisor.OpRenameat, supervisor.OpRenameat2,
	supervisor.OpFork, supervisor.OpVfork, supervisor.OpInotify, supervisor.OpFallocate,
}

// byArguments are the system calls the guard sends to the supervisor for
// some arguments only, with their operations.
var byArguments = map[string]string{
	"clone": supervisor.OpClone, "unlinkat": supervisor.OpUnlinkat,
	"open": supervisor.OpOpen, "openat": supervisor.OpOpenat,
	"ioctl": supervisor.OpIoctl, "fcntl": supervisor.OpFcntl,
}

// allowedIoctls are the ioctl commands a command may issue on any
// descriptor, its roots' files or any other: they read, or act on a
// terminal, socket or the open file only, never change a file. Any other
// is refused (EPERM), but for supervisor.MediatedIoctls, which the
// supervisor performs beneath the roots. (Landlock governs ioctls on
// devices on top: only the writable devices allow theirs.)
var allowedIoctls = []uint32{
	// The open file: close-on-exec, non-blocking, async, bytes waiting.
	0x5451, 0x5450, 0x5421, 0x5452, 0x541b, 0x5460, // FIOCLEX, FIONCLEX, FIONBIO, FIOASYNC, FIONREAD, FIOQSIZE
	// Terminals (commands have none; shells, readline and runtimes ask).
	unix.TCGETS, unix.TCSETS, unix.TCSETSW, unix.TCSETSF, unix.TCGETS2, unix.TCSETS2, unix.TCSETSW2, unix.TCSETSF2,
	unix.TCGETA, unix.TCSETA, unix.TCSETAW, unix.TCSETAF, unix.TCSBRK, unix.TCSBRKP, unix.TCXONC, unix.TCFLSH,
	unix.TIOCGWINSZ, unix.TIOCSWINSZ, unix.TIOCGPGRP, unix.TIOCSPGRP, unix.TIOCGSID, unix.TIOCOUTQ, unix.TIOCGPTN,
	// Sockets: what is queued, and the interfaces' names and addresses.
	unix.SIOCATMARK, unix.SIOCOUTQNSD, unix.SIOCGSTAMP, 0x8907, // SIOCGSTAMPNS
	unix.SIOCGIFNAME, unix.SIOCGIFCONF, unix.SIOCGIFFLAGS, unix.SIOCGIFADDR, unix.SIOCGIFDSTADDR,
	unix.SIOCGIFBRDADDR, unix.SIOCGIFNETMASK, unix.SIOCGIFMETRIC, unix.SIOCGIFMTU, unix.SIOCGIFHWADDR,
	unix.SIOCGIFINDEX, unix.SIOCGIFTXQLEN,
	// Files, read only: flags, version, extended attributes, extents,
	// the file system's label and ID, encryption policy, verity.
	unix.FS_IOC_GETFLAGS, 0x80046601, // FS_IOC32_GETFLAGS
	0x80087601, 0x80047601, // FS_IOC_GETVERSION, FS_IOC32_GETVERSION
	0x801c581f,                         // FS_IOC_FSGETXATTR
	0xc020660b,                         // FS_IOC_FIEMAP
	2,                                  // FIGETBSZ
	0x81009431, 0x80111500, 0x80811501, // FS_IOC_GETFSLABEL, FS_IOC_GETFSUUID, FS_IOC_GETFSSYSFSPATH
	unix.FS_IOC_GET_ENCRYPTION_POLICY, 0xc0096616, // and _EX
	unix.FS_IOC_MEASURE_VERITY, 0xc0286687, // FS_IOC_READ_VERITY_METADATA
	unix.RNDGETENTCNT,
}

// allowedFcntls are the fcntl commands a command may issue on any
// descriptor: they act on the descriptor or the open file (flags, owner
// for SIGIO, which Landlock scopes; pipe size; seals, which only memfds
// take), or read. Locks go to the supervisor (supervisor.MediatedFcntls);
// refusedFcntls change a file outside the command's reach for everyone
// (a lease makes every writer wait for its break; a write hint is the
// inode's). Any other gets EINVAL, as from a kernel that does not know it.
var allowedFcntls = []uint32{
	unix.F_DUPFD, unix.F_GETFD, unix.F_SETFD, unix.F_GETFL, unix.F_SETFL, unix.F_GETLK,
	unix.F_SETOWN, unix.F_GETOWN, unix.F_SETSIG, unix.F_GETSIG, unix.F_SETOWN_EX, unix.F_GETOWN_EX,
	17,                                                           // F_GETOWNER_UIDS
	unix.F_OFD_GETLK, unix.F_GETLEASE, unix.F_NOTIFY, 1027, 1028, // F_DUPFD_QUERY, F_CREATED_QUERY
	unix.F_DUPFD_CLOEXEC, unix.F_SETPIPE_SZ, unix.F_GETPIPE_SZ, unix.F_ADD_SEALS, unix.F_GET_SEALS,
	1035, 1037, // F_GET_RW_HINT, F_GET_FILE_RW_HINT
}

var refusedFcntls = []uint32{unix.F_SETLEASE, 1029, 1036, 1038} // F_CANCELLK, F_SET_RW_HINT, F_SET_FILE_RW_HINT

// otherProcess are the calls that act on another process or user given by
// their first argument, for which 0 means the caller: resource limits,
// scheduling, CPU affinity, memory policy. Any other target is refused,
// whatever the kernel's permission checks would say for the same uid.
var otherProcess = []string{
	"prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
	"migrate_pages", "move_pages",
}

// lastSyscall is the newest system call number the filter lets through on
// the architectures with one table for new calls (x86-64, arm64): mseal.
// Later ones (setxattrat, removexattrat, file_setattr, open_tree_attr, ...)
// get ENOSYS, which libc treats as an old kernel, until someone reviews
// them here.
const lastSyscall = 462

// unreviewed are the system calls below lastSyscall that no one reviewed
// here (Linux 6.8's mount listing and LSM attributes): they get ENOSYS,
// as the newer ones do, rather than the default's allow.
var unreviewed = []string{"statmount", "listmount", "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules"}

// namespaceFlags are clone's flags that make new namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

func errno(e syscall.Errno) seccomp.Action { return seccomp.ActionErrno | seccomp.Action(e) }

// rules say which parts of the filter apply.
type rules struct {
	sockets bool // network deny: Unix sockets only
	sysvIPC bool // System V IPC allowed
	notify  bool // the supervisor mediates (user notification)
}

// policy is the name-based part of the filter. Conditions here compare
// whole 64-bit arguments, which suits tests whose match denies (a value
// with garbage in its high half is denied too) and bit tests; equality
// that allows is in guard, on the low half the kernel reads of an int.
func policy(info *arch.Info, r rules) seccomp.Policy {
	known := func(names ...string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	deny := known(denied...)
	if !r.sysvIPC {
		deny = append(deny, known(sysvIPC...)...)
	}
	setid := uint64(unix.S_ISUID | unix.S_ISGID)
	var withArgs []seccomp.NameWithConditions
	cond := func(name string, arg uint32, op seccomp.Operation, v uint64) {
		if _, ok := info.SyscallNames[name]; ok {
			withArgs = append(withArgs, seccomp.NameWithConditions{Name: name, Conditions: []seccomp.Condition{{Argument: arg, Operation: op, Value: v}}})
		}
	}
	// No set-user-ID or set-group-ID file, made or changed: one could
	// outlive the call. (The supervisor refuses the chmod family's itself
	// when it mediates them: a system call sits in one group only.)
	for name, arg := range map[string]uint32{"open": 2, "openat": 3, "creat": 1, "mknod": 1, "mknodat": 2, "mkdir": 1, "mkdirat": 2} {
		cond(name, arg, seccomp.BitsSet, setid)
	}
	if !r.notify {
		for name, arg := range map[string]uint32{"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2} {
			cond(name, arg, seccomp.BitsSet, setid)
		}
	}
	for _, name := range otherProcess {
		cond(name, 0, seccomp.NotEqual, 0)
	}
	// setpriority(which, who) and ioprio_set(which, who): who 0 only (the
	// caller, its group); which is checked in guard.
	cond("setpriority", 1, seccomp.NotEqual, 0)
	cond("ioprio_set", 1, seccomp.NotEqual, 0)
	// setpgid only to lead a group of one's own (pgid 0): joining another
	// group, the supervisor's or the server's, would let kill(0, ...) reach it.
	cond("setpgid", 1, seccomp.NotEqual, 0)
	cond("clone", 0, seccomp.BitsSet, namespaceFlags)
	p := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: deny, NamesWithCondtions: withArgs, Action: errno(unix.EPERM)},
			// clone3's flags and openat2's mode are out of seccomp's reach;
			// ENOSYS makes libc fall back to clone and openat, checked above;
			// the unreviewed ones fail as on an older kernel.
			{Names: known(append([]string{"clone3", "openat2"}, unreviewed...)...), Action: errno(unix.ENOSYS)},
		},
	}
	if r.notify {
		p.Syscalls = append(p.Syscalls, seccomp.SyscallGroup{Names: known(mediated...), Action: seccomp.ActionUserNotify})
	}
	return p
}

// notifyOps maps the mediated system calls' numbers to their operations.
func notifyOps(info *arch.Info) map[int]string {
	ops := map[int]string{}
	for _, name := range mediated {
		if nr, ok := info.SyscallNames[name]; ok {
			ops[nr] = name
		}
	}
	for name, op := range byArguments {
		if nr, ok := info.SyscallNames[name]; ok {
			ops[nr] = op
		}
	}
	return ops
}

// guard returns the filter's first instructions, for the checks the
// policy cannot express: anything but the native architecture is killed
// (a 32-bit int 0x80 call would otherwise pass a filter written for 64-bit
// numbers); system calls newer than lastSyscall get ENOSYS; no signal,
// pidfd or process group can reach the supervisor or the server;
// setpriority and ioprio_set may not name a user; no process makes itself
// not dumpable (which would hide it from the supervisor); ioctls and
// fcntls are allow-lists, with what the supervisor performs sent to it;
// the supervisor gets clones (to count them), removals of a file's name
// and O_TMPFILE opens (to account for files without a name); and sockets
// are Unix ones only (under network deny), never datagram ones, which
// could send to any path. Arguments are compared on their low 32 bits,
// which is all the kernel reads of an int, a PID or an ioctl's or fcntl's
// command.
func guard(info *arch.Info, self, server int, r rules) []bpf.Instruction {
	a := &guardAsm{}
	a.emit(bpf.LoadAbsolute{Off: 4, Size: 4}) // arch
	a.emit(bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1})
	a.emit(bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)})
	a.emit(ldNR)
	if info.ID == arch.X86_64.ID || info.ID == arch.AARCH64.ID {
		// Newer than the filter knows: the whole range, x32's (bit 30) too.
		a.emit(bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: lastSyscall, SkipFalse: 1})
		a.jump(enosys)
	}

	protected := []uint32{uint32(self), uint32(server), uint32(-self), uint32(-server)}
	nr := func(name string) (uint32, bool) {
		n, ok := info.SyscallNames[name]
		return uint32(n), ok
	}
	when := func(name string, action label, conds ...cond) {
		if n, ok := nr(name); ok {
			a.rule(n, conds, action)
		}
	}
	for _, v := range append(protected, 0xFFFFFFFF) { // kill(-1): every process the user may signal
		when("kill", eperm, cond{0, bpf.JumpEqual, v})
	}
	for _, name := range []string{"rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open"} {
		for _, v := range protected {
			when(name, eperm, cond{0, bpf.JumpEqual, v})
		}
	}
	// The Go runtime preempts goroutines with tgkill(self, tid, SIGURG).
	for _, v := range []uint32{uint32(self), uint32(server)} {
		when("tgkill", eperm, cond{2, bpf.JumpNotEqual, uint32(unix.SIGURG)}, cond{0, bpf.JumpEqual, v})
	}
	when("setpriority", eperm, cond{0, bpf.JumpEqual, unix.PRIO_USER})
	when("ioprio_set", eperm, cond{0, bpf.JumpEqual, 3}) // IOPRIO_WHO_USER
	// Not dumpable, a process's descriptors and memory are out of the
	// supervisor's reach (ptrace's access check).
	when("prctl", eperm, cond{0, bpf.JumpEqual, unix.PR_SET_DUMPABLE}, cond{1, bpf.JumpNotEqual, 1})
	// What the supervisor performs; without it, refused (the inode
	// flags) or let through as before it (the locks).
	performed, locks := eperm, allow
	if r.notify {
		performed, locks = notify, notify
	}
	var ioctls []kase
	for _, c := range allowedIoctls {
		ioctls = append(ioctls, kase{c, allow})
	}
	for _, c := range supervisor.MediatedIoctls {
		ioctls = append(ioctls, kase{c, performed})
	}
	var fcntls []kase
	for _, c := range allowedFcntls {
		fcntls = append(fcntls, kase{c, allow})
	}
	for _, c := range supervisor.MediatedFcntls {
		fcntls = append(fcntls, kase{c, locks})
	}
	for _, c := range refusedFcntls {
		fcntls = append(fcntls, kase{c, eperm})
	}
	if n, ok := nr("ioctl"); ok {
		a.dispatch(n, 1, ioctls, eperm)
	}
	if n, ok := nr("fcntl"); ok {
		a.dispatch(n, 1, fcntls, einval)
	}
	if r.notify {
		when("clone", notify, cond{0, bpf.JumpBitsNotSet, namespaceFlags})
		when("unlinkat", notify, cond{2, bpf.JumpBitsNotSet, unix.AT_REMOVEDIR})
		tmpfile := uint32(unix.O_TMPFILE &^ unix.O_DIRECTORY)
		when("open", notify, cond{1, bpf.JumpBitsSet, tmpfile})
		when("openat", notify, cond{2, bpf.JumpBitsSet, tmpfile})
	}
	if r.sockets {
		// Network deny: Unix sockets only. EACCES reads as "Permission
		// denied", as Landlock's refused connect does.
		when("socket", eacces, cond{0, bpf.JumpNotEqual, unix.AF_UNIX})
	}
	for _, name := range []string{"socket", "socketpair"} {
		// SOCK_DGRAM (and SOCK_RAW, which Unix sockets turn into it): a
		// datagram may be sent to any path with sendto or sendmsg, whose
		// address the filter cannot read.
		when(name, eacces, cond{0, bpf.JumpEqual, unix.AF_UNIX}, cond{1, bpf.JumpBitsSet, unix.SOCK_DGRAM})
	}
	return a.finish()
}

// The guard's actions, placed after its rules.
type label int

const (
	eperm label = iota
	eacces
	enosys
	einval
	notify
	allow
	labels
)

// kase is one case of a dispatch: an argument's value and where it goes.
type kase struct {
	val uint32
	to  label
}

var ldNR = bpf.LoadAbsolute{Off: 0, Size: 4}

// cond tests the low 32 bits of one argument.
type cond struct {
	arg  uint32
	test bpf.JumpTest
	val  uint32
}

// guardAsm assembles the guard: rules in order, each ending in an action
// label, then the labels, then a fall through to the policy.
type guardAsm struct {
	prog  []bpf.Instruction
	fixes []fix
}

// fix is a jump to patch once the labels are placed.
type fix struct {
	at int
	to label
}

func (a *guardAsm) emit(in bpf.Instruction) { a.prog = append(a.prog, in) }

// jump emits an unconditional jump to l.
func (a *guardAsm) jump(l label) {
	a.fixes = append(a.fixes, fix{len(a.prog), l})
	a.emit(bpf.Jump{})
}

// rule emits: if the system call is nr and every cond holds, go to action;
// otherwise go on with the system call number loaded. A system call that
// is not nr costs one instruction.
func (a *guardAsm) rule(nr uint32, conds []cond, action label) {
	start := len(a.prog)
	a.emit(bpf.JumpIf{}) // to the next rule when not nr; patched below
	var fails []int      // jumps to the reload when a cond does not hold
	for _, c := range conds {
		a.emit(bpf.LoadAbsolute{Off: 16 + 8*c.arg, Size: 4}) // little-endian: the low half comes first
		fails = append(fails, len(a.prog))
		a.emit(bpf.JumpIf{Cond: c.test, Val: c.val})
	}
	a.jump(action)
	reload := len(a.prog)
	if len(conds) > 0 {
		a.emit(ldNR)
	}
	next := len(a.prog)
	a.prog[start] = bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: uint8(next - start - 1)}
	for _, i := range fails {
		j := a.prog[i].(bpf.JumpIf)
		j.SkipFalse = uint8(reload - i - 1)
		a.prog[i] = j
	}
}

// dispatch emits: if the system call is nr, go to the label of the first
// case whose value the low half of argument arg equals, else to def. A
// system call that is not nr costs one instruction and a jump.
func (a *guardAsm) dispatch(nr, arg uint32, cases []kase, def label) {
	a.emit(bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipTrue: 1})
	over := len(a.prog)
	a.emit(bpf.Jump{}) // over the block; patched below
	a.emit(bpf.LoadAbsolute{Off: 16 + 8*arg, Size: 4})
	for _, c := range cases {
		a.emit(bpf.JumpIf{Cond: bpf.JumpEqual, Val: c.val, SkipFalse: 1})
		a.jump(c.to)
	}
	a.jump(def)
	a.prog[over] = bpf.Jump{Skip: uint32(len(a.prog) - over - 1)}
}

// finish places the labels after a jump over them to the policy, and
// patches the jumps to them.
func (a *guardAsm) finish() []bpf.Instruction {
	a.emit(bpf.Jump{Skip: uint32(labels)})
	at := make([]int, labels)
	for l, action := range []seccomp.Action{errno(unix.EPERM), errno(unix.EACCES), errno(unix.ENOSYS), errno(unix.EINVAL), seccomp.ActionUserNotify, seccomp.ActionAllow} {
		at[l] = len(a.prog)
		a.emit(bpf.RetConstant{Val: uint32(action)})
	}
	for _, f := range a.fixes {
		a.prog[f.at] = bpf.Jump{Skip: uint32(at[f.to] - f.at - 1)}
	}
	return a.prog
}

// filter assembles the seccomp program, with the supervisor's PID left as
// supervisor.SelfPID for the supervisor to fill in: the guard, then the
// policy; and the mediated system calls' operations by number.
func filter(r rules) (supervisor.Filter, map[int]string, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, nil, err
	}
	p := policy(info, r)
	body, err := p.Assemble()
	if err != nil {
		return nil, nil, err
	}
	raw, err := bpf.Assemble(append(guard(info, supervisor.SelfPID, os.Getpid(), r), body...))
	if err != nil {
		return nil, nil, err
	}
	var insns supervisor.Filter
	for _, in := range raw {
		insns = insns.Append(in.Op, in.Jt, in.Jf, in.K)
	}
	var ops map[int]string
	if r.notify {
		ops = notifyOps(info)
	}
	return insns, ops, nil
}
