package sandbox

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestFilter runs the seccomp filter in x/net/bpf's VM on made-up system
// calls: what the filter must refuse, and what it must let through.
func TestFilter(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	const self, server = 4242, 4200
	r := rules{sockets: true, notify: true}
	p := policy(info, r)
	body, err := p.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(append(guard(info, self, server, r), body...))
	if err != nil {
		t.Fatal(err)
	}
	nr := func(name string) int {
		n, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("no system call %s", name)
		}
		return n
	}
	// The VM loads 32-bit words big-endian, as from a packet; the kernel
	// loads them native (little-endian here, low half first). Lay out
	// seccomp_data word by word so the VM reads what the kernel would.
	run := func(archID uint32, n int, args ...uint64) uint32 {
		b := make([]byte, 64)
		binary.BigEndian.PutUint32(b[0:], uint32(n))
		binary.BigEndian.PutUint32(b[4:], archID)
		for i, a := range args {
			binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
			binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
		}
		v, err := vm.Run(b)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(v)
	}
	native := uint32(info.ID)
	allow, eperm, eacces, enosys := uint32(seccomp.ActionAllow), uint32(errno(unix.EPERM)), uint32(errno(unix.EACCES)), uint32(errno(unix.ENOSYS))
	notify := uint32(seccomp.ActionUserNotify)
	einval := uint32(errno(unix.EINVAL))
	const garbage = 7 << 32 // high bits the kernel ignores in an int argument
	neg := func(pid int) uint64 { return uint64(int64(-pid)) }
	tests := []struct {
		name string
		arch uint32
		call string
		args []uint64
		want uint32
	}{
		{"kill the supervisor", native, "kill", []uint64{self, 9}, eperm},
		{"kill the server", native, "kill", []uint64{server, 9}, eperm},
		{"kill the supervisor's group", native, "kill", []uint64{neg(self), 9}, eperm},
		{"kill the supervisor, high bits set", native, "kill", []uint64{1<<32 | self, 9}, eperm},
		{"kill -1", native, "kill", []uint64{neg(1), 9}, eperm},
		{"kill another process", native, "kill", []uint64{5000, 9}, allow},
		{"tgkill the supervisor", native, "tgkill", []uint64{self, self, 9}, eperm},
		{"the runtime's preemption signal", native, "tgkill", []uint64{self, self + 1, uint64(unix.SIGURG)}, allow},
		{"tkill", native, "tkill", []uint64{self + 1, 9}, eperm},
		{"pidfd_open the server", native, "pidfd_open", []uint64{server, 0}, eperm},
		{"join the supervisor's group", native, "setpgid", []uint64{0, self}, eperm},
		{"join another group", native, "setpgid", []uint64{0, 5000}, eperm},
		{"own group", native, "setpgid", []uint64{0, 0}, allow},
		{"ptrace attach", native, "ptrace", []uint64{unix.PTRACE_ATTACH, server}, eperm},
		{"ptrace traceme", native, "ptrace", []uint64{unix.PTRACE_TRACEME}, eperm},
		{"mount", native, "mount", nil, eperm},
		{"unshare", native, "unshare", []uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone a thread goes to the supervisor, which counts it", native, "clone", []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, notify},
		{"fork goes to the supervisor", native, "fork", nil, notify},
		{"vfork goes to the supervisor", native, "vfork", nil, notify},
		{"clone a namespace", native, "clone", []uint64{unix.CLONE_NEWNET}, eperm},
		{"clone a namespace, high bits set", native, "clone", []uint64{garbage | unix.CLONE_NEWUSER}, eperm},
		{"not dumpable", native, "prctl", []uint64{unix.PR_SET_DUMPABLE, 0}, eperm},
		{"not dumpable, suid_dumpable's 2", native, "prctl", []uint64{unix.PR_SET_DUMPABLE, 2}, eperm},
		{"dumpable", native, "prctl", []uint64{unix.PR_SET_DUMPABLE, 1}, allow},
		{"another prctl", native, "prctl", []uint64{unix.PR_SET_NAME, 0}, allow},
		{"memfd_create goes to the supervisor", native, "memfd_create", []uint64{0, unix.MFD_CLOEXEC}, notify},
		{"memfd_secret", native, "memfd_secret", nil, eperm},
		{"O_TMPFILE goes to the supervisor", native, "openat", []uint64{0, 0, unix.O_TMPFILE | unix.O_RDWR, 0o600}, notify},
		{"O_TMPFILE by open", native, "open", []uint64{0, unix.O_TMPFILE | unix.O_WRONLY, 0o600}, notify},
		{"unlink goes to the supervisor", native, "unlink", nil, notify},
		{"unlinkat goes to the supervisor", native, "unlinkat", []uint64{0, 0, 0}, notify},
		{"rmdir by unlinkat does not", native, "unlinkat", []uint64{0, 0, unix.AT_REMOVEDIR}, allow},
		{"rename goes to the supervisor", native, "renameat2", []uint64{0, 0, 0, 0, 0}, notify},
		{"bind goes to the supervisor", native, "bind", nil, notify},
		{"inotify_add_watch goes to the supervisor", native, "inotify_add_watch", []uint64{3, 0, unix.IN_ALL_EVENTS}, notify},
		{"fanotify_init", native, "fanotify_init", []uint64{unix.FAN_CLASS_NOTIF | unix.FAN_REPORT_DFID_NAME, 0}, eperm},
		{"fanotify_mark", native, "fanotify_mark", nil, eperm},
		// ioctls: an allow-list; what the supervisor performs; the rest refused.
		{"FIONREAD", native, "ioctl", []uint64{3, 0x541b, 0}, allow},
		{"FIOCLEX", native, "ioctl", []uint64{3, 0x5451, 0}, allow},
		{"terminal size", native, "ioctl", []uint64{1, unix.TIOCGWINSZ, 0}, allow},
		{"FS_IOC_GETFLAGS", native, "ioctl", []uint64{3, unix.FS_IOC_GETFLAGS, 0}, allow},
		{"FICLONE goes to the supervisor", native, "ioctl", []uint64{4, unix.FICLONE, 3}, notify},
		{"FS_IOC_SETVERSION", native, "ioctl", []uint64{3, 0x40087602, 0}, eperm},
		{"FS_IOC_SETVERSION, 32-bit", native, "ioctl", []uint64{3, 0x40047602, 0}, eperm},
		{"FS_IOC_ENABLE_VERITY", native, "ioctl", []uint64{3, 0x40806685, 0}, eperm},
		{"FIDEDUPERANGE", native, "ioctl", []uint64{3, unix.FIDEDUPERANGE, 0}, eperm},
		{"an ioctl no one knows", native, "ioctl", []uint64{3, 0xdeadbeef, 0}, eperm},
		{"an allowed ioctl, high bits set", native, "ioctl", []uint64{3, garbage | 0x541b, 0}, allow},
		// fcntls: an allow-list; locks to the supervisor; leases and hints refused.
		{"F_GETFL", native, "fcntl", []uint64{3, unix.F_GETFL}, allow},
		{"F_SETFL", native, "fcntl", []uint64{3, unix.F_SETFL, unix.O_NONBLOCK}, allow},
		{"F_DUPFD_CLOEXEC", native, "fcntl", []uint64{3, unix.F_DUPFD_CLOEXEC, 10}, allow},
		{"F_SETLK goes to the supervisor", native, "fcntl", []uint64{3, unix.F_SETLK, 0}, notify},
		{"F_SETLKW goes to the supervisor", native, "fcntl", []uint64{3, unix.F_SETLKW, 0}, notify},
		{"F_OFD_SETLK goes to the supervisor", native, "fcntl", []uint64{3, unix.F_OFD_SETLK, 0}, notify},
		{"F_SETLEASE", native, "fcntl", []uint64{3, unix.F_SETLEASE, unix.F_RDLCK}, eperm},
		{"F_SETLEASE, high bits set", native, "fcntl", []uint64{3, garbage | unix.F_SETLEASE, unix.F_RDLCK}, eperm},
		{"F_SET_RW_HINT", native, "fcntl", []uint64{3, 1036, 0}, eperm},
		{"an fcntl no one knows", native, "fcntl", []uint64{3, 4242, 0}, einval},
		{"clone3", native, "clone3", nil, enosys},
		{"openat2", native, "openat2", nil, enosys},
		{"a system call newer than the filter", native, "read", nil, allow},
		{"statmount, not reviewed", native, "statmount", nil, enosys},
		{"listmount, not reviewed", native, "listmount", nil, enosys},
		{"lsm_get_self_attr, not reviewed", native, "lsm_get_self_attr", nil, enosys},
		{"lsm_set_self_attr, not reviewed", native, "lsm_set_self_attr", nil, enosys},
		{"lsm_list_modules, not reviewed", native, "lsm_list_modules", nil, enosys},
		{"mseal, the newest reviewed", native, "mseal", nil, allow},
		{"setuid chmod goes to the supervisor, which refuses it", native, "fchmodat", []uint64{0, 0, 0o4755}, notify},
		{"plain chmod goes to the supervisor", native, "fchmodat", []uint64{0, 0, 0o755}, notify},
		{"fchmodat2 goes to the supervisor", native, "fchmodat2", []uint64{0, 0, 0o755, 0}, notify},
		{"chown goes to the supervisor", native, "fchownat", []uint64{0, 0, 1, 1, 0}, notify},
		{"utimensat goes to the supervisor", native, "utimensat", []uint64{0, 0, 0, 0}, notify},
		{"setxattr goes to the supervisor", native, "setxattr", nil, notify},
		{"connect goes to the supervisor", native, "connect", nil, notify},
		{"flock goes to the supervisor", native, "flock", []uint64{3, unix.LOCK_EX}, notify},
		{"setflags ioctl goes to the supervisor", native, "ioctl", []uint64{3, unix.FS_IOC_SETFLAGS, 0}, notify},
		{"setflags ioctl, high bits set", native, "ioctl", []uint64{3, garbage | unix.FS_IOC_SETFLAGS, 0}, notify},
		{"a terminal ioctl", native, "ioctl", []uint64{3, unix.TCGETS, 0}, allow},
		{"open a set-ID file", native, "openat", []uint64{0, 0, unix.O_CREAT, 0o4755}, eperm},
		{"mknod a set-ID file", native, "mknodat", []uint64{0, 0, unix.S_IFREG | 0o2755}, eperm},
		{"mkdir a set-group-ID folder", native, "mkdir", []uint64{0, 0o2755}, eperm},
		{"open a file", native, "openat", []uint64{0, 0, unix.O_CREAT, 0o644}, allow},
		{"prlimit another process", native, "prlimit64", []uint64{server, unix.RLIMIT_NOFILE}, eperm},
		{"prlimit itself", native, "prlimit64", []uint64{0, unix.RLIMIT_NOFILE}, allow},
		{"renice another process", native, "setpriority", []uint64{unix.PRIO_PROCESS, server, 19}, eperm},
		{"renice the user", native, "setpriority", []uint64{unix.PRIO_USER, 0, 19}, eperm},
		{"renice the user, high bits set", native, "setpriority", []uint64{garbage | unix.PRIO_USER, 0, 19}, eperm},
		{"renice itself", native, "setpriority", []uint64{unix.PRIO_PROCESS, 0, 19}, allow},
		{"SCHED_IDLE another process", native, "sched_setattr", []uint64{server, 0, 0}, eperm},
		{"pin another process", native, "sched_setaffinity", []uint64{server, 8, 0}, eperm},
		{"ioprio the user", native, "ioprio_set", []uint64{3, 0, 0}, eperm},
		{"ioprio another process", native, "ioprio_set", []uint64{1, server, 0}, eperm},
		{"ioprio itself", native, "ioprio_set", []uint64{1, 0, 0}, allow},
		{"System V shared memory", native, "shmget", nil, eperm},
		{"System V semaphores", native, "semget", nil, eperm},
		{"POSIX message queue made", native, "mq_open", []uint64{0, unix.O_CREAT | unix.O_RDWR, 0o600, 0}, eperm},
		{"POSIX message queue removed", native, "mq_unlink", nil, eperm},
		{"inet socket", native, "socket", []uint64{unix.AF_INET, unix.SOCK_STREAM}, eacces},
		{"inet socket posing as Unix", native, "socket", []uint64{garbage | unix.AF_UNIX, unix.SOCK_STREAM}, allow},
		{"unix socket", native, "socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, allow},
		{"unix seqpacket socket", native, "socket", []uint64{unix.AF_UNIX, unix.SOCK_SEQPACKET}, allow},
		{"unix datagram socket", native, "socket", []uint64{unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK}, eacces},
		{"unix raw socket (a datagram one)", native, "socket", []uint64{unix.AF_UNIX, unix.SOCK_RAW}, eacces},
		{"unix datagram pair", native, "socketpair", []uint64{unix.AF_UNIX, unix.SOCK_DGRAM}, eacces},
		{"unix stream pair", native, "socketpair", []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, allow},
		{"read", native, "read", nil, allow},
		{"another architecture", native + 1, "read", nil, uint32(seccomp.ActionKillProcess)},
	}
	for _, tt := range tests {
		n := nr(tt.call)
		if tt.name == "a system call newer than the filter" {
			n = lastSyscall + 1
			tt.want = enosys
		}
		if got := run(tt.arch, n, tt.args...); got != tt.want {
			t.Errorf("%s: %#x; want %#x", tt.name, got, tt.want)
		}
	}
	if got := run(native, 0x40000000|nr("read")); got != enosys {
		t.Errorf("an x32 system call: %#x; want ENOSYS", got)
	}
}

func TestConfig(t *testing.T) {
	for _, bad := range []Config{{Mode: "maybe"}, {Network: "some"}, {ReadOnlyPaths: []string{"usr"}}, {MemoryBytes: 1 << 20}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v is valid", bad)
		}
	}
	sb, r, err := New(Config{Mode: Off})
	if sb != nil || err != nil || r.Mode != Off || !strings.Contains(r.String(), "unsafe") {
		t.Errorf("off: %v, %+v, %v", sb, r, err)
	}
	d := Config{}.WithDefaults()
	if d.Mode != Auto || d.Network != NetworkDeny || d.MemoryBytes != 0 || d.CPUSeconds == 0 || d.MaxProcesses == 0 {
		t.Errorf("defaults %+v", d)
	}
	missing := Restrictions{Mode: Auto, Files: true, LandlockABI: 3, Network: NetworkDeny, Missing: []string{"TCP connect and bind (needs Landlock ABI 4)"}}
	if s := missing.String(); !strings.Contains(s, "NOT enforced: TCP connect and bind") {
		t.Errorf("String() = %q; want it to name what is missing", s)
	}
}

// TestReadOnlyPathsLookedUpOnce checks that New looks the read-only paths
// up once: folders and files apart, and the configured ones that do not
// exist reported by Unreadable, while a missing default is not.
func TestReadOnlyPathsLookedUpOnce(t *testing.T) {
	dir := t.TempDir()
	file, missing := filepath.Join(dir, "notes.txt"), filepath.Join(dir, "usr-locl")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb, _, err := New(Config{ReadOnlyPaths: []string{dir, file, missing}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	if diff := cmp.Diff([]string{missing}, sb.Unreadable()); diff != "" {
		t.Errorf("Unreadable (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{dir}, {file}}, [][]string{sb.readDirs, sb.readFiles}); diff != "" {
		t.Errorf("folders and files (-want +got):\n%s", diff)
	}
	def, _, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(def.Close)
	if u := def.Unreadable(); len(u) != 0 {
		t.Errorf("the defaults' missing paths are reported: %v", u)
	}
	var off *Sandbox
	if off.Unreadable() != nil {
		t.Error("a nil (off) sandbox reports paths")
	}
}

// BenchmarkRuleset measures the Landlock ruleset the server builds for each
// sandboxed command, with the default read-only paths.
func BenchmarkRuleset(b *testing.B) {
	sb, _, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sb.Close)
	writable := []string{b.TempDir(), b.TempDir()}
	for b.Loop() {
		fd, _, err := sb.ruleset(writable)
		if err != nil {
			b.Fatal(err)
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
