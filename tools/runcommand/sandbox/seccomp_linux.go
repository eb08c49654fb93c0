package sandbox

import (
	"os"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox/supervisor"
)

// denied are the system calls a tool command never needs, after Docker's
// default profile and Codex's Linux sandbox: debugging other processes,
// mounts and namespaces, kernel keyrings, BPF, perf, modules, kexec, reboot,
// swap, clocks, io_uring (whose operations seccomp cannot see), and stealing
// file descriptors. They fail with EPERM.
var denied = []string{
	"process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
	"sethostname", "setdomainname", "vhangup", "iopl", "ioperm", "uselib", "ustat", "sysfs",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "nfsservctl",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"tkill", // signals a thread by ID alone, which could be the supervisor's; tgkill is checked below
}

// namespaceFlags are clone's flags that make new namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

func errno(e syscall.Errno) seccomp.Action { return seccomp.ActionErrno | seccomp.Action(e) }

// policy is the name-based part of the filter.
func policy(info *arch.Info, sockets bool) seccomp.Policy {
	var names []string
	for _, n := range denied {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	setid := uint64(unix.S_ISUID | unix.S_ISGID)
	var withArgs []seccomp.NameWithConditions
	for name, arg := range map[string]uint32{"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2} {
		if _, ok := info.SyscallNames[name]; ok {
			// No setuid or setgid files, which could outlive the sandbox.
			withArgs = append(withArgs, seccomp.NameWithConditions{Name: name, Conditions: []seccomp.Condition{{Argument: arg, Operation: seccomp.BitsSet, Value: setid}}})
		}
	}
	// ptrace but PTRACE_TRACEME and PTRACE_DETACH, which the supervisor uses
	// to set memory_bytes on the command before it runs; on their own they
	// let nobody read or change another process.
	withArgs = append(withArgs, seccomp.NameWithConditions{Name: "ptrace", Conditions: []seccomp.Condition{
		{Argument: 0, Operation: seccomp.NotEqual, Value: unix.PTRACE_TRACEME},
		{Argument: 0, Operation: seccomp.NotEqual, Value: unix.PTRACE_DETACH},
	}})
	// setpgid only to lead a group of one's own (pgid 0): joining another
	// group, the supervisor's or the server's, would let kill(0, ...) reach it.
	withArgs = append(withArgs, seccomp.NameWithConditions{Name: "setpgid", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.NotEqual, Value: 0}}})
	withArgs = append(withArgs, seccomp.NameWithConditions{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags}}})
	p := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: names, NamesWithCondtions: withArgs, Action: errno(unix.EPERM)},
			// clone3's flags are out of seccomp's reach; ENOSYS makes libc fall
			// back to clone, whose flags are checked above.
			{Names: []string{"clone3"}, Action: errno(unix.ENOSYS)},
		},
	}
	if sockets {
		// Network deny: Unix sockets only. EACCES reads as "Permission
		// denied", as Landlock's refused connect does.
		p.Syscalls = append(p.Syscalls, seccomp.SyscallGroup{
			NamesWithCondtions: []seccomp.NameWithConditions{{Name: "socket", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}}},
			Action:             errno(unix.EACCES),
		})
	}
	return p
}

// guard returns the filter's first instructions: anything but the native
// architecture is killed (a 32-bit int 0x80 call would otherwise pass a
// filter written for 64-bit numbers), and no signal, pidfd or process group
// can reach the supervisor or the server. PIDs are compared on their low 32
// bits, which is all the kernel reads of them.
func guard(info *arch.Info, self, server int) []bpf.Instruction {
	const (
		nrOff   = 0
		archOff = 4
	)
	lo := func(arg uint32) uint32 { return 16 + 8*arg } // little-endian: the low half comes first
	ldNR := bpf.LoadAbsolute{Off: nrOff, Size: 4}
	protected := []uint32{uint32(self), uint32(server), uint32(-self), uint32(-server)}
	var prog []bpf.Instruction
	var toDeny []int // indices of jumps whose true branch is deny
	prog = append(prog,
		bpf.LoadAbsolute{Off: archOff, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
		ldNR,
	)
	block := func(name string, arg uint32, values []uint32) {
		nr, ok := info.SyscallNames[name]
		if !ok {
			return
		}
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: uint8(len(values) + 2)},
			bpf.LoadAbsolute{Off: lo(arg), Size: 4})
		for _, v := range values {
			toDeny = append(toDeny, len(prog))
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v})
		}
		prog = append(prog, ldNR)
	}
	block("kill", 0, append(protected, 0xFFFFFFFF)) // and kill(-1): every process the user may signal
	block("rt_sigqueueinfo", 0, protected)
	block("rt_tgsigqueueinfo", 0, protected)
	block("pidfd_open", 0, protected)
	if nr, ok := info.SyscallNames["tgkill"]; ok {
		// The Go runtime preempts goroutines with tgkill(self, tid, SIGURG).
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: 6},
			bpf.LoadAbsolute{Off: lo(2), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(unix.SIGURG), SkipTrue: 3},
			bpf.LoadAbsolute{Off: lo(0), Size: 4})
		toDeny = append(toDeny, len(prog), len(prog)+1)
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(self)},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(server)},
			ldNR)
	}
	// Fall through to the policy; deny sits right after this jump.
	prog = append(prog, bpf.Jump{Skip: 1})
	deny := len(prog)
	prog = append(prog, bpf.RetConstant{Val: uint32(errno(unix.EPERM))})
	for _, i := range toDeny {
		j := prog[i].(bpf.JumpIf)
		j.SkipTrue = uint8(deny - i - 1)
		prog[i] = j
	}
	return prog
}

// filter assembles the seccomp program: the guard, with the supervisor's
// PID left as supervisor.SelfPID for it to fill in, then the policy.
func filter(sockets bool) ([]supervisor.Insn, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	p := policy(info, sockets)
	body, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(append(guard(info, supervisor.SelfPID, os.Getpid()), body...))
	if err != nil {
		return nil, err
	}
	insns := make([]supervisor.Insn, len(raw))
	for i, r := range raw {
		insns[i] = supervisor.Insn{Op: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return insns, nil
}
