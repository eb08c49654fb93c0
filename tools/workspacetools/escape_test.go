package workspacetools_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// probePy is the escape corpus's Python helper: each operation either fails
// with Python's own error (a traceback naming it) or prints "escaped".
const probePy = `import ctypes, fcntl, os, signal, socket, stat, struct, sys, time
op, args = sys.argv[1], sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, what + ": " + os.strerror(e))
def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
if op == "connect":
    socket.create_connection((args[0], int(args[1])), timeout=5)
elif op == "listen":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
elif op == "udp":
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", int(args[0])))
elif op == "raw":
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
elif op == "packet":
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
elif op == "netlink":
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
elif op == "abstract":
    socket.socket(socket.AF_UNIX).connect("\0" + args[0])
elif op == "abstract-bind":
    s = socket.socket(socket.AF_UNIX); s.bind("\0" + args[0]); s.listen()
elif op == "unix-connect":
    socket.socket(socket.AF_UNIX).connect(args[0])
elif op == "unix-dgram":
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", args[0])
elif op == "unix-dgram-pair":
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b"x", args[0])
elif op == "unix-here":
    srv = socket.socket(socket.AF_UNIX); srv.bind("here.sock"); srv.listen()
    socket.socket(socket.AF_UNIX).connect("here.sock"); srv.accept()
    os.unlink("here.sock"); print("unix socket in the workspace works"); sys.exit(0)
elif op == "ptrace":
    check(libc.ptrace(16, int(args[0]), None, None), "ptrace attach")
elif op == "vmread":
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    buf = ctypes.create_string_buffer(16)
    local, remote = iovec(ctypes.cast(buf, ctypes.c_void_p), 16), iovec(0x400000, 16)
    check(libc.process_vm_readv(int(args[0]), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0), "process_vm_readv")
elif op == "setpgid":
    os.setpgid(0, int(args[0]))
elif op == "memory":
    b = bytearray(1 << 30)
elif op == "memory-tree":
    kids = []
    for i in range(4):
        pid = os.fork()
        if pid == 0:
            data = b"\x01" * (100 << 20)
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
elif op == "daemon":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "7310"])
        os._exit(0)
    os.wait()
    sys.exit(0)
elif op == "prlimit":  # pid resource soft hard
    import resource
    resource.prlimit(int(args[0]), getattr(resource, args[1]), (int(args[2]), int(args[3])))
elif op == "renice":
    os.setpriority(os.PRIO_PROCESS, int(args[0]), int(args[1]))
elif op == "renice-user":
    os.setpriority(os.PRIO_USER, int(args[0]), 0)
elif op == "affinity":
    os.sched_setaffinity(int(args[0]), os.sched_getaffinity(int(args[0])))
elif op == "sched":
    os.sched_setscheduler(int(args[0]), os.SCHED_OTHER, os.sched_param(0))
elif op == "ioprio":  # which who: best effort, level 4 (the default's equal)
    check(libc.syscall(251, int(args[0]), int(args[1]), (2 << 13) | 4), "ioprio_set")
elif op == "pidfd-kill":
    fd = os.open("/proc/%d" % os.getppid(), os.O_RDONLY | os.O_DIRECTORY)
    signal.pidfd_send_signal(fd, signal.SIGKILL)
elif op == "sigio-kill":
    ppid = os.getppid()
    r, w = os.pipe()
    fcntl.fcntl(r, fcntl.F_SETOWN, ppid)
    fcntl.fcntl(r, 10, signal.SIGKILL)  # F_SETSIG
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(w, b"x")
    time.sleep(0.3)
    if not alive(ppid):
        print("ESCAPED-" + op); sys.exit(0)
    print("supervisor alive"); sys.exit(0)
elif op == "chmod":
    os.chmod(args[0], int(args[1], 8))
elif op == "thread-chmod":  # from a thread that is not the process's leader
    import threading
    failed = []
    def chmod():
        try:
            os.chmod(args[0], 0o777)
        except OSError as e:
            failed.append(e)
    th = threading.Thread(target=chmod); th.start(); th.join()
    if failed:
        raise failed[0]
elif op == "fchmod":
    os.fchmod(os.open(args[0], os.O_RDONLY), 0o777)
elif op == "opath-chmod":
    fd = os.open(args[0], os.O_PATH)
    check(libc.syscall(452, fd, b"", 0o777, 0x1000), "fchmodat2")  # AT_EMPTY_PATH
elif op == "opath-chown":
    fd = os.open(args[0], os.O_PATH)
    check(libc.syscall(260, fd, b"", os.getuid(), os.getgid(), 0x1000), "fchownat")  # AT_EMPTY_PATH
elif op == "utime":
    os.utime(args[0], (0, 0))
elif op == "setxattr":
    os.setxattr(args[0], "user.toolwire", b"x")
elif op == "removexattr":
    os.removexattr(args[0], "user.toolwire")
elif op == "chattr":
    fcntl.ioctl(os.open(args[0], os.O_RDONLY), 0x40086602, struct.pack("l", 0x40))  # FS_IOC_SETFLAGS, FS_NODUMP_FL
elif op == "flock":
    fcntl.flock(os.open(args[0], os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)
elif op == "shm":
    check(libc.shmget(0, 1 << 20, 0o1666), "shmget")
elif op == "inotify":  # watch a folder: every name made in it, and when
    fd = libc.inotify_init1(0); check(fd, "inotify_init1")
    check(libc.inotify_add_watch(fd, args[0].encode(), 0xfff), "inotify_add_watch")
elif op == "inotify-here":
    fd = libc.inotify_init1(0); check(fd, "inotify_init1")
    check(libc.inotify_add_watch(fd, b".", 0x100), "inotify_add_watch")  # IN_CREATE
    open("watched.txt", "w").close(); os.unlink("watched.txt")
    ev = os.read(fd, 4096)
    if b"watched.txt" in ev:
        print("inotify in the workspace works"); sys.exit(0)
    print("no event"); sys.exit(1)
elif op == "fanotify":  # unprivileged: FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME, then an inode mark
    fd = libc.fanotify_init(0xc00, 0); check(fd, "fanotify_init")
    check(libc.fanotify_mark(fd, 1, ctypes.c_uint64(0x40000020), -100, args[0].encode()), "fanotify_mark")
elif op == "mq-open":  # mq_open(name, O_CREAT|O_RDWR, 0600, NULL): Landlock refuses the open, after the queue is made
    check(libc.syscall(240, args[0].encode(), 0o102, 0o600, None), "mq_open")
elif op == "mq-unlink":
    check(libc.syscall(241, args[0].encode()), "mq_unlink")
elif op == "msgq":
    check(libc.msgget(0, 0o1666), "msgget")
elif op == "sem":
    check(libc.semget(0, 1, 0o1666), "semget")
elif op == "hidden-files":
    fds = []
    for i in range(40):
        fd = os.open("hidden%d" % i, os.O_CREAT | os.O_RDWR, 0o600)
        os.write(fd, b"\x01" * 1000000)
        os.unlink("hidden%d" % i)
        fds.append(fd)
    time.sleep(10)
elif op == "memfds":
    fds = []
    for i in range(40):
        fd = os.memfd_create("m%d" % i)
        os.write(fd, b"\x01" * 1000000)
        fds.append(fd)
    time.sleep(10)
elif op == "suid-open":
    os.open("suid", os.O_CREAT | os.O_WRONLY, 0o4755)
elif op == "suid-mknod":
    os.mknod("suid", stat.S_IFREG | 0o6755)
elif op == "sgid-mkdir":
    os.mkdir("sgid", 0o2755)
print("ESCAPED-" + op)
`

// procState is what another process could change of pid: its resource
// limits, nice value, scheduling policy and CPU affinity.
func procState(t *testing.T, pid int) string {
	t.Helper()
	limits, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	var cpus string
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Cpus_allowed_list:") {
			cpus = line
		}
	}
	// After "pid (comm)": nice is field 19 of stat (index 16 here), policy 41 (38).
	return fmt.Sprintf("%snice %s policy %s %s", limits, f[16], f[38], cpus)
}

// watched is a loopback listener standing in for one of the server's
// ports; it counts the connections it accepts.
type watched struct {
	net.Listener
	accepted atomic.Int32
}

func listen(t *testing.T, network, addr string) *watched {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{Listener: ln}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return w
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// userTasks counts the processes and threads of this process's real user,
// which RLIMIT_NPROC counts.
func userTasks() int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var uid, threads int
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid, _ = strconv.Atoi(f[1])
			} else if len(f) > 1 && f[0] == "Threads:" {
				threads, _ = strconv.Atoi(f[1])
			}
		}
		if uid == os.Getuid() {
			n += threads
		}
	}
	return n
}

// supervisorMarker is the command line of this test binary's supervisors;
// other packages' tests, running at the same time, have their own binary.
var supervisorMarker = func() string {
	exe, _ := os.Executable()
	return exe + "\x00" + sandbox.Command
}()

// supervisorsLeft lists this test binary's supervisors that are more than
// a sandbox keeps (its spares and warm ones), or that have a child; those
// it keeps have none. A used supervisor it does not keep reports its
// command's end before it exits, so it may take a moment to go: it waits
// until just before the test's deadline (testDeadline) for them to.
func supervisorsLeft(t *testing.T) []string {
	deadline := testenv.Deadline(t)
	for {
		sups := testenv.Processes(supervisorMarker)
		pids := map[string]bool{}
		for _, s := range sups {
			pids[strings.SplitN(s, ":", 2)[0]] = true
		}
		var parents []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...
			if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 1 && pids[f[1]] {
				parents = append(parents, f[1]+" has child "+e.Name())
			}
		}
		if len(sups) <= sandbox.Spares+sandbox.Warm && len(parents) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return append(sups, parents...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEscapeCorpus runs each escape attempt as a run_command call through
// ExecuteBatch over a real loopback server, with the sandbox required. Each
// must fail with the command's own error (or, for the attempts to outlive
// the call, simply not outlive it) and leave no trace: nothing outside the
// workspace changes, no listener sees a connection, no process survives.
func TestEscapeCorpus(t *testing.T) {
	c := wt.NewCorpus(t)
	root := os.Getuid() == 0
	secrets := map[string]string{"tokens": "token-secret\n", "config.yaml": "auth: secret\n", "store.db": "bolt-secret\n"}
	for name, content := range secrets {
		if err := os.WriteFile(filepath.Join(c.Parent, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.Write(t, "probe.py", probePy)
	if err := os.Mkdir(filepath.Join(c.Dir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.LookPath(t, "python3")

	// A read-only path of the test's, holding a file only the server's uid
	// may read and files a command may read but must not change or lock.
	ro := searchableTempDir(t)
	for name, mode := range map[string]os.FileMode{"private.txt": 0o600, "lockme": 0o644} {
		if err := os.WriteFile(filepath.Join(ro, name), []byte("read-only\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	maxProcs := uint64(userTasks() + 64) // room for this process's threads and a little more: the fork bomb stops there
	if root {
		maxProcs = 200 // the kernel does not count processes for root: the supervisor does, per call
	}
	// Not a tight CPU limit: RLIMIT_CPU counts the kernel's work for a
	// command, and an ext4 without a journal (this project's machines)
	// charges each file made a scan past the inodes deleted in the last
	// minute, by anyone: 3000 files cost the shell 1.3-3.4 s. The CPU
	// spin has a test of its own (TestEscapeCPUSpin).
	cfg := sandbox.Config{
		Mode:              sandbox.Required,
		Accept:            []string{sandbox.GapOwnerFiles}, // one workspace: commands have the server's uid
		ReadOnlyPaths:     append(slices.Clone(sandbox.DefaultReadOnlyPaths), ro),
		CPUSeconds:        60,
		MemoryBytes:       256 << 20,
		MaxFileBytes:      1 << 20,
		MaxProcesses:      maxProcs,
		MaxWorkspaceBytes: 32 << 20,
		MaxWorkspaceFiles: 2000,
	}
	sb, r, err := sandbox.New(cfg)
	if err != nil {
		testenv.Missing(t, "a kernel that enforces the whole sandbox ("+err.Error()+")")
	}
	t.Cleanup(sb.Close)
	t.Logf("sandbox: %s", r)
	cl, grpcAddr := serveAddr(t, c.WS, workspacetools.Options{RunCommand: true, Command: runcommand.Options{Shell: true, Sandbox: sb, KillGrace: 300 * time.Millisecond}})
	admin := listen(t, "tcp", "127.0.0.1:0")
	admin6, err6 := net.Listen("tcp", "[::1]:0")
	if err6 == nil {
		admin6.Close()
	}
	redis := miniredis.RunT(t)
	// A POSIX message queue of the server's uid, outside the sandbox.
	mqName := fmt.Sprintf("toolwire-escape-%d", os.Getpid())
	if fd, err := mqOpen(mqName, unix.O_CREAT); err != nil {
		t.Fatalf("making a POSIX message queue: %v", err)
	} else {
		unix.Close(fd)
	}
	t.Cleanup(func() { mqUnlink(mqName) })
	abstract := fmt.Sprintf("toolwire-escape-%d", os.Getpid())
	unixLn := listen(t, "unix", "@"+abstract)
	appSock := listen(t, "unix", filepath.Join(c.Parent, "app.sock")) // a database's or a container runtime's socket
	dgram, err := net.ListenPacket("unixgram", filepath.Join(c.Parent, "dgram.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer dgram.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	// Another process of the server's uid, outside the sandbox: any
	// process on the host, for root.
	victim := exec.Command("sleep", "7399")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })

	server, pgid := os.Getpid(), syscall.Getpgrp()
	S, V := strconv.Itoa(server), strconv.Itoa(victim.Process.Pid)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	sameNofile := fmt.Sprintf("%d:%d", lim.Cur, lim.Max) // what the server has: an escape changes nothing, but succeeds
	unusedUID := "54321"                                 // PRIO_USER and IOPRIO_WHO_USER on a uid without processes: ESRCH, not EPERM, if one got through
	P := c.Parent
	denied := []string{"Permission denied", "Operation not permitted", "permission denied"}
	type escape struct {
		name, command string
		want          []string // one of these in the output; nil: any result, but no trace
		check         func(t *testing.T)
	}
	// The attempts whose command succeeds (printing one of want): what
	// they do shows only in its effect.
	succeeds := map[string]bool{"kill the supervisor with SIGIO": true, "a Unix socket in the workspace": true, "inotify in the workspace": true}
	noSetID := func(t *testing.T) {
		for _, name := range []string{"suid", "sgid"} {
			if info, err := os.Stat(filepath.Join(c.Dir, name)); err == nil && info.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("%s has mode %v", name, info.Mode())
			}
		}
	}
	limit := func(name string) []string { return []string{"sandbox." + name} }
	corpus := []escape{
		// Writes outside the workspace.
		{"write absolute path", "echo x > " + P + "/outside.txt", denied, nil},
		{"create absolute path", "echo x > " + P + "/new.txt", denied, nil},
		{"write ..", "echo x > ../outside.txt", denied, nil},
		{"write through a folder symlink", "echo x > dir-out/outside.txt", denied, nil},
		{"write through a file symlink", "echo x > link-out", denied, nil},
		{"write through a new symlink", "ln -sf " + P + " up && echo x > up/new.txt", denied, nil},
		{"write via /proc/self/cwd", "echo x > /proc/self/cwd/../outside.txt", denied, nil},
		{"write via /proc/self/root", "echo x > /proc/self/root" + P + "/outside.txt", denied, nil},
		{"make a folder outside", "mkdir " + P + "/newdir", denied, nil},
		{"delete outside", "rm -f " + P + "/outside.txt", denied, nil},
		{"move a file out", "echo x > mine && mv mine " + P + "/moved", denied, nil},
		{"hard-link an outside file in", "ln " + P + "/outside.txt stolen", append(denied, "Invalid cross-device link"), nil},
		{"write /etc", "echo x > /etc/toolwire-escape", denied, nil},
		{"write /usr/bin", "cp /bin/sh /usr/bin/toolwire-escape", denied, nil},
		{"write /tmp", "echo x > /tmp/toolwire-escape", denied, nil},
		{"write /dev/shm", "echo x > /dev/shm/toolwire-escape", denied, nil},
		{"write beside the call's TMPDIR", "echo x > $TMPDIR/../toolwire-escape", denied, nil},
		{"make a device node", "mknod disk b 8 0", denied, nil},
		{"setuid file", "cp /bin/sh suid && chmod u+s suid", denied, noSetID},
		{"setgid file", "cp /bin/sh suid && chmod g+s suid", denied, noSetID},
		// Reads of the server's secrets and other sessions' files.
		{"read the tokens file", "cat " + P + "/tokens", denied, nil},
		{"read the config file", "cat " + P + "/config.yaml", denied, nil},
		{"read the store file", "cat " + P + "/store.db", denied, nil},
		{"read via /proc/self/root", "cat /proc/self/root" + P + "/tokens", denied, nil},
		{"read another session's file", "cat ../ws-other/secret.txt", denied, nil},
		{"list another session's folder", "ls ../ws-other", denied, nil},
		{"read through a symlink chain", "cat chain1", denied, nil},
		{"read the server's environment", fmt.Sprintf("cat /proc/%d/environ", server), denied, nil},
		{"read the server's memory", fmt.Sprintf("head -c 16 /proc/%d/mem", server), denied, nil},
		{"follow the server's open files", fmt.Sprintf("ls -l /proc/%d/fd/", server), denied, nil},
		// Network.
		{"connect to the gRPC port", "python3 probe.py connect 127.0.0.1 " + port(grpcAddr), denied, nil},
		{"connect to the admin port", "python3 probe.py connect 127.0.0.1 " + port(admin.Addr().String()), denied, nil},
		{"connect to Redis", "python3 probe.py connect 127.0.0.1 " + redis.Port(), denied, nil},
		{"connect over IPv6 loopback", "python3 probe.py connect ::1 " + port(grpcAddr), denied, nil},
		{"listen on a TCP port", "python3 probe.py listen", denied, nil},
		{"UDP send", "python3 probe.py udp " + port(udp.LocalAddr().String()), denied, nil},
		{"raw socket", "python3 probe.py raw", denied, nil},
		{"packet socket", "python3 probe.py packet", denied, nil},
		{"netlink socket", "python3 probe.py netlink", denied, nil},
		{"abstract Unix socket of the server", "python3 probe.py abstract " + abstract, denied, nil},
		// Watches need only read permission, which Landlock does not
		// check: the folder holding the sessions' folders shows each new
		// one's name, and a watch on it every name made there.
		{"watch the folder holding the workspace with inotify", "python3 probe.py inotify " + P, denied, nil},
		{"watch another session's folder with inotify", "python3 probe.py inotify ../ws-other", denied, nil},
		{"watch the call's TMPDIR's parent with inotify", "python3 probe.py inotify $TMPDIR/..", denied, nil},
		{"watch through a symlink with inotify", "ln -s " + P + " up-watch && python3 probe.py inotify up-watch", denied, nil},
		{"watch a folder outside with fanotify", "python3 probe.py fanotify " + P, denied, nil},
		{"inotify in the workspace", "python3 probe.py inotify-here", []string{"inotify in the workspace works"}, nil},
		// Nothing in the sandbox can connect to an abstract name, so one
		// bound there serves only processes outside: a host service's
		// name squatted, its clients' connections taken.
		{"bind an abstract Unix socket name", "python3 probe.py abstract-bind " + abstract + "-squat", denied, nil},
		// Other processes.
		{"ptrace the server", "python3 probe.py ptrace " + strconv.Itoa(server), denied, nil},
		{"read the server's memory with process_vm_readv", "python3 probe.py vmread " + strconv.Itoa(server), denied, nil},
		{"kill the server", "kill -9 " + strconv.Itoa(server), denied, nil},
		{"signal the server's process group", "kill -CONT -" + strconv.Itoa(pgid), denied, nil},
		{"join the server's process group", "python3 probe.py setpgid " + strconv.Itoa(pgid), denied, nil},
		{"kill the supervisor", "kill -9 $PPID", denied, nil},
		{"kill the supervisor through a pidfd", "setsid sleep 7307 & exec python3 probe.py pidfd-kill", denied, nil},
		{"kill the supervisor with SIGIO", "setsid sleep 7308 & exec python3 probe.py sigio-kill", []string{"supervisor alive"}, nil},
		{"lower the supervisor's open files", "prlimit --pid $PPID --nofile=" + sameNofile, denied, nil},
		{"renice the supervisor", "renice -n 0 -p $PPID", denied, nil},
		// Other processes' limits and scheduling: the server, and any
		// process of its uid.
		{"lower the server's open files", "prlimit --pid " + S + " --nofile=" + sameNofile, denied, nil},
		{"lower the server's CPU time", "python3 probe.py prlimit " + S + " RLIMIT_CPU -1 -1", denied, nil},
		{"limit another process of the uid", "python3 probe.py prlimit " + V + " RLIMIT_FSIZE 1 1", denied, nil},
		{"renice the server", "python3 probe.py renice " + S + " 0", denied, nil},
		{"renice another process of the uid", "python3 probe.py renice " + V + " 19", denied, nil},
		{"renice a whole uid", "python3 probe.py renice-user " + unusedUID, denied, nil},
		{"pin the server to its CPUs", "python3 probe.py affinity " + S, denied, nil},
		{"change the server's scheduling", "python3 probe.py sched " + S, denied, nil},
		{"the server's I/O priority", "python3 probe.py ioprio 1 " + S, denied, nil},
		{"a whole uid's I/O priority", "python3 probe.py ioprio 3 " + unusedUID, denied, nil},
		{"signal every process", "kill -CONT -1", denied, nil},
		{"mount", "mount -t tmpfs none mnt", append(denied, "must be superuser"), nil},
		{"unshare -r", "unshare -r true", denied, nil},
		{"unshare -n", "unshare -n true", denied, nil},
		{"chroot", "/usr/sbin/chroot / true", denied, nil},
		// Metadata outside the workspace, which Landlock does not govern.
		{"chmod outside", "chmod 000 " + P + "/outside.txt", denied, nil},
		{"chmod the folder holding the workspace", "chmod 0777 " + P, denied, nil},
		{"chmod through a symlink", "ln -s " + P + "/outside.txt lnk && chmod 000 lnk", denied, nil},
		{"chmod through /proc/self/root", "chmod 000 /proc/self/root" + P + "/outside.txt", append(denied, "Too many levels of symbolic links"), nil},
		{"chmod outside from a thread", "python3 probe.py thread-chmod " + P + "/outside.txt", denied, nil},
		{"chmod a read-only file by descriptor", "python3 probe.py fchmod " + ro + "/lockme", denied, nil},
		{"chmod through an O_PATH descriptor", "python3 probe.py opath-chmod " + P + "/outside.txt", denied, nil},
		{"chown outside", "chown $(id -u):$(id -g) " + P + "/outside.txt", denied, nil},
		{"chown through an O_PATH descriptor", "python3 probe.py opath-chown " + P + "/outside.txt", denied, nil},
		{"backdate a file outside", "touch -d 2000-01-01 " + P + "/outside.txt", denied, nil},
		{"backdate through a symlink", "touch -d 2000-01-01 link-out", denied, nil},
		{"utime outside", "python3 probe.py utime " + P + "/outside.txt", denied, nil},
		{"set an attribute outside", "python3 probe.py setxattr " + P + "/outside.txt", denied, nil},
		{"remove an attribute outside", "python3 probe.py removexattr " + P + "/outside.txt", denied, nil},
		{"inode flags of a read-only file", "python3 probe.py chattr " + ro + "/lockme", denied, nil},
		{"lock a read-only file", "python3 probe.py flock " + ro + "/lockme", denied, nil},
		// System V IPC.
		{"System V shared memory", "python3 probe.py shm", denied, nil},
		{"System V message queue", "python3 probe.py msgq", denied, nil},
		{"System V semaphore", "python3 probe.py sem", denied, nil},
		// POSIX message queues: a uid's, outliving the call.
		{"make a POSIX message queue", "python3 probe.py mq-open " + mqName + "-new", denied, func(t *testing.T) {
			if fd, err := mqOpen(mqName+"-new", 0); err == nil {
				unix.Close(fd)
				mqUnlink(mqName + "-new")
				t.Error("the command made a POSIX message queue, which outlives the call")
			}
		}},
		{"remove another process's POSIX message queue", "python3 probe.py mq-unlink " + mqName, denied, func(t *testing.T) {
			fd, err := mqOpen(mqName, 0)
			if err != nil {
				t.Errorf("the server's POSIX message queue: %v; want it still there", err)
				return
			}
			unix.Close(fd)
		}},
		// Set-ID bits by creation.
		{"create a set-user-ID file", "python3 probe.py suid-open", denied, noSetID},
		{"mknod a set-ID file", "python3 probe.py suid-mknod", denied, noSetID},
		{"mkdir a set-group-ID folder", "python3 probe.py sgid-mkdir", denied, noSetID},
		// Unix sockets by path.
		{"connect to a Unix socket outside", "python3 probe.py unix-connect " + P + "/app.sock", denied, nil},
		{"connect through a symlink in the workspace", "ln -s " + P + "/app.sock s && python3 probe.py unix-connect s", denied, nil},
		{"connect by a relative path", "python3 probe.py unix-connect ../app.sock", denied, nil},
		{"send a datagram outside", "python3 probe.py unix-dgram " + P + "/dgram.sock", denied, nil},
		{"send a datagram from a socket pair", "python3 probe.py unix-dgram-pair " + P + "/dgram.sock", denied, nil},
		// Resources.
		{"memory bomb", "python3 probe.py memory", []string{"MemoryError"}, nil},
		{"fill the disk past max_file_bytes", "exec dd if=/dev/zero of=big bs=64k count=64", []string{"file size limit exceeded"}, func(t *testing.T) {
			if info, err := os.Stat(filepath.Join(c.Dir, "big")); err != nil || info.Size() > 1<<20 {
				t.Errorf("big: %v, %v; want at most max_file_bytes", info, err)
			}
		}},
		// Outliving the call.
		{"background process", "sleep 7301 & echo started", nil, nil},
		{"setsid", "setsid sleep 7302 & echo started", nil, nil},
		{"double fork", "(sleep 7303 &) ; echo started", nil, nil},
		{"nohup", "nohup sleep 7304 >/dev/null 2>&1 & echo started", nil, nil},
		{"daemon: fork, setsid, fork", "python3 probe.py daemon", nil, nil},
		{"ignoring SIGTERM", "trap '' TERM; sleep 7305 & echo started", nil, nil},
	}
	corpus = append(corpus,
		// Aggregate limits: across the call's processes and files.
		escape{"memory across processes", "python3 probe.py memory-tree", limit("memory_bytes"), nil},
		escape{"disk across files", "for i in $(seq 40); do head -c 1000000 /dev/zero > f$i; done; sleep 10", limit("max_workspace_bytes"), func(t *testing.T) {
			os.Remove(filepath.Join(c.Dir, "f1")) // room for the next attempts
			for i := 2; i <= 40; i++ {
				os.Remove(filepath.Join(c.Dir, "f"+strconv.Itoa(i)))
			}
		}},
		escape{"disk in deleted files held open", "python3 probe.py hidden-files", limit("max_workspace_bytes"), nil},
		escape{"disk in memfds", "python3 probe.py memfds", limit("max_workspace_bytes"), nil},
		escape{"many files", "mkdir many && cd many && for i in $(seq 3000); do : > $i; done; sleep 10", limit("max_workspace_files"), func(t *testing.T) {
			os.RemoveAll(filepath.Join(c.Dir, "many"))
		}},
		// What must keep working: a Unix socket inside the workspace.
		escape{"a Unix socket in the workspace", "python3 probe.py unix-here", []string{"unix socket in the workspace works"}, nil},
	)
	if root {
		// Root is not bound by RLIMIT_NPROC; the supervisor counts the
		// call's processes, and every process still ends with the call.
		corpus = append(corpus,
			escape{"process swarm (root)", "for i in $(seq 100); do sleep 7306 & done; echo started", nil, nil},
			escape{"processes past max_processes (root)", "for i in $(seq 300); do sleep 7309 & done; sleep 10", limit("max_processes"), nil})
	} else {
		corpus = append(corpus, escape{"fork bomb", "b() { b | b & }; b; sleep 1 # toolwire-fork-bomb", nil, nil})
	}

	before := c.Outside(t)
	serverState, victimState := procState(t, server), procState(t, victim.Process.Pid)
	for _, e := range corpus {
		t.Run(e.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			b, err := client.Collect(cl.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
				client.Call("escape", "run_command", map[string]any{"command": e.command}),
			}}))
			if err != nil {
				t.Fatal(err)
			}
			res := b.Results[0]
			text := client.Text(res)
			if strings.Contains(text, "ESCAPED-") {
				t.Errorf("escaped:\n%s", text)
			}
			if e.want != nil {
				ok := false
				for _, w := range e.want {
					ok = ok || strings.Contains(text, w)
				}
				if res.GetIsError() == succeeds[e.name] || !ok {
					t.Errorf("result (error %v):\n%s\nwant %s with one of %q", res.GetIsError(), text, map[bool]string{true: "a success", false: "an error"}[succeeds[e.name]], e.want)
				}
			}
			if strings.Contains(text, "supervisor ended without reporting") {
				t.Errorf("the supervisor died:\n%s", text)
			}
			if !strings.Contains(res.GetDetails(), `"mode":"required"`) {
				t.Errorf("details do not name the sandbox: %s", res.GetDetails())
			}
			if diff := cmp.Diff(before, c.Outside(t)); diff != "" {
				t.Errorf("outside the workspace (-before +after):\n%s", diff)
			}
			for _, p := range []string{"/etc/toolwire-escape", "/usr/bin/toolwire-escape", "/tmp/toolwire-escape", "/dev/shm/toolwire-escape"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s exists", p)
					os.Remove(p)
				}
			}
			if after := procState(t, server); after != serverState {
				t.Errorf("the server's limits or scheduling changed:\n%s\nwas\n%s", after, serverState)
			}
			if after := procState(t, victim.Process.Pid); after != victimState {
				t.Errorf("another process of the uid changed:\n%s\nwas\n%s", after, victimState)
			}
			for _, m := range []string{"sleep\x00730", "sleep\x007310", "toolwire-fork-bomb"} {
				if left := processesLeft(t, m); len(left) > 0 {
					t.Errorf("processes outlived the call: %q", left)
				}
			}
			if left := supervisorsLeft(t); len(left) > 0 {
				t.Errorf("supervisors outlived the call: %q", left)
			}
			if n := admin.accepted.Load() + unixLn.accepted.Load() + appSock.accepted.Load(); n > 0 {
				t.Errorf("the listeners accepted %d connections", n)
			}
			if n := redis.TotalConnectionCount(); n > 0 {
				t.Errorf("Redis accepted %d connections", n)
			}
			if e.check != nil {
				e.check(t)
			}
			t.Logf("%s", text)
		})
	}
	for name, l := range map[string]net.PacketConn{"UDP": udp, "Unix datagram": dgram} {
		l.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, _, err := l.ReadFrom(make([]byte, 64)); err == nil {
			t.Errorf("a datagram reached the %s listener", name)
		}
	}
	// The read-only file no command could lock is free.
	if f, err := os.Open(filepath.Join(ro, "lockme")); err == nil {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Errorf("the read-only file is locked after the corpus: %v", err)
		}
		f.Close()
	}
	if len(corpus) < 100 {
		t.Errorf("the corpus has %d attempts; it had 61 before the second containment pass added one or more per class", len(corpus))
	}
	t.Logf("escape corpus: %d attempts", len(corpus))
}

// TestEscapeCPUSpin checks that a command spinning on the CPU is ended at
// cpu_seconds, with a result naming the limit, and leaves no process. It
// has a sandbox of its own: the corpus's cpu_seconds is loose, since the
// kernel's work for a command that makes many files counts too.
func TestEscapeCPUSpin(t *testing.T) {
	t.Parallel()
	sb, _, err := sandbox.New(sandbox.Config{Mode: sandbox.Required, Accept: []string{sandbox.GapOwnerFiles}, CPUSeconds: 1})
	if err != nil {
		testenv.Missing(t, "a kernel that enforces the whole sandbox ("+err.Error()+")")
	}
	t.Cleanup(sb.Close)
	c := wt.NewCorpus(t)
	tool := runcommand.New(c.WS, runcommand.Options{Shell: true, Sandbox: sb, KillGrace: 300 * time.Millisecond})
	res := wt.Call(t, tool, `{"command":"while :; do :; done # toolwire-cpu-spin"}`)
	if text := wt.Text(res); !res.IsError || !strings.Contains(text, "CPU time limit exceeded") || !strings.Contains(text, "sandbox.cpu_seconds: 1") {
		t.Errorf("result (error %v):\n%s\nwant an error naming sandbox.cpu_seconds: 1", res.IsError, text)
	}
	if left := processesLeft(t, "toolwire-cpu-spin"); len(left) > 0 {
		t.Errorf("processes outlived the call: %q", left)
	}
}

// TestEscapeAcrossSessions serves a folder per session with the sandbox
// required, in each profile this machine offers (commands under the
// server's uid; as root, a uid per session too), and runs bob's attempts on
// alice while alice's command is running: bob's commands cannot read, list,
// write, link into, change the metadata of, or find alice's folder or the
// root holding them, by relative or absolute path, through a symlink, or
// via /proc; nor signal, limit or reschedule alice's command. Alice's
// command, files and folder are unchanged, and her next command runs.
func TestEscapeAcrossSessions(t *testing.T) {
	for name, cfg := range profiles("300000-300099") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			escapeAcrossSessions(t, cfg)
		})
	}
}

// sleepMarkers numbers the long sleeps escapeAcrossSessions names.
var sleepMarkers atomic.Int64

func escapeAcrossSessions(t *testing.T, cfg sandbox.Config) {
	// A read-only path holding a file only the server's uid may read.
	ro := searchableTempDir(t)
	if err := os.WriteFile(filepath.Join(ro, "private.txt"), []byte("server-private\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.ReadOnlyPaths = append(slices.Clone(sandbox.DefaultReadOnlyPaths), ro)
	sb, s, root, c := serveSessions(t, cfg)
	perSession := sb.Restrictions().Identity == sandbox.IdentitySession
	run := func(ctx context.Context, session, command string) *toolwirev1.CallResult {
		t.Helper()
		b, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{SessionId: session, Calls: []*toolwirev1.ToolCall{
			client.Call("c", "run_command", map[string]any{"command": command}),
		}}))
		if err != nil {
			t.Fatal(err)
		}
		return b.Results[0]
	}
	if r := run(t.Context(), "alice", "echo alice-secret > notes.txt && pwd"); r.GetIsError() {
		t.Fatalf("alice: %s", client.Text(r))
	}
	alice := filepath.Join(root, s.FolderName("", "alice"))
	// Alice's command runs while bob tries.
	// Named for this subtest alone: the profiles' subtests run at once,
	// and another run of these tests may be on the machine.
	marker := fmt.Sprintf("73%d.%d", sleepMarkers.Add(1), os.Getpid())
	aliceCtx, stopAlice := context.WithCancel(t.Context())
	aliceDone := make(chan error, 1)
	go func() {
		_, err := client.Collect(c.ExecuteBatch(aliceCtx, &toolwirev1.ExecuteBatchRequest{SessionId: "alice", Calls: []*toolwirev1.ToolCall{
			client.Call("c", "run_command", map[string]any{"command": "sleep 7" + marker}),
		}}))
		aliceDone <- err
	}()
	var victim int
	for deadline := testenv.Deadline(t); victim == 0; time.Sleep(10 * time.Millisecond) {
		switch procs := testenv.Processes("sleep\x007" + marker + "\x00"); len(procs) {
		case 0:
		case 1:
			victim, _ = strconv.Atoi(strings.SplitN(procs[0], ":", 2)[0])
		default:
			t.Fatalf("more than one process is alice's command: %q", procs)
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's command did not start")
		}
	}
	if r := run(t.Context(), "bob", "true"); r.GetIsError() { // bob's folder made, which changes the root's time
		t.Fatalf("bob: %s", client.Text(r))
	}
	victimState := procState(t, victim)
	folderBefore, rootBefore := metadata(t, alice), metadata(t, root)
	V := strconv.Itoa(victim)
	sibling := "../" + filepath.Base(alice)
	unkeyed := sha256.Sum256([]byte(strconv.Quote("") + "/alice"))
	attempts := []string{
		"cat " + sibling + "/notes.txt",
		"cat " + alice + "/notes.txt",
		"cat /proc/self/cwd/" + sibling + "/notes.txt",
		"ls ..",
		"ls " + root,
		"echo bob > " + sibling + "/notes.txt",
		"echo bob > " + alice + "/new.txt",
		"ln -s " + alice + " a && cat a/notes.txt",
		"ln " + alice + "/notes.txt stolen",
		"rm -f " + alice + "/notes.txt",
		"mkdir ../bob-extra",
		// Metadata of the other's folder and the root.
		"chmod 0 " + alice,
		"chmod 0 " + root,
		"touch -d 2000-01-01 " + alice,
		"touch -d 2000-01-01 " + alice + "/notes.txt",
		"chmod 0777 " + alice + "/notes.txt",
		// The other session's running command.
		"kill -9 " + V,
		"prlimit --pid " + V + " --fsize=1:1",
		"renice -n 19 -p " + V,
		"ls /proc/" + V + "/cwd/",
		"cat /proc/" + V + "/environ",
		// Guessing the folder's name as it used to be made.
		"ls -ld ../" + hex.EncodeToString(unkeyed[:])[:32],
	}
	if perSession {
		// With uids apart, the kernel refuses even what Landlock does not
		// govern, and what only the server's uid may read.
		attempts = append(attempts, "stat "+alice+"/notes.txt", "cat "+ro+"/private.txt")
	}
	for _, command := range attempts {
		r := run(t.Context(), "bob", command)
		text := client.Text(r)
		if !r.GetIsError() || strings.Contains(text, "alice-secret") || strings.Contains(text, "server-private") ||
			!(strings.Contains(text, "Permission denied") || strings.Contains(text, "Operation not permitted") ||
				strings.Contains(text, "Invalid cross-device link") || strings.Contains(text, "No such file or directory")) {
			t.Errorf("bob: %s:\n%s\nwant the command's own denial", command, text)
		}
	}
	if after := procState(t, victim); after != victimState {
		t.Errorf("alice's running command changed:\n%s\nwas\n%s", after, victimState)
	}
	if got := metadata(t, alice); got != folderBefore {
		t.Errorf("alice's folder: %s; was %s", got, folderBefore)
	}
	if got := metadata(t, root); got != rootBefore {
		t.Errorf("the sessions' root: %s; was %s", got, rootBefore)
	}
	stopAlice()
	if err := <-aliceDone; status.Code(err) != codes.Canceled {
		t.Errorf("alice's cancelled batch: %v", err)
	}
	for deadline := testenv.Deadline(t); len(testenv.Processes("sleep\x007"+marker+"\x00")) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("alice's command outlived her cancelled call")
		}
	}
	if b, err := os.ReadFile(filepath.Join(alice, "notes.txt")); err != nil || string(b) != "alice-secret\n" {
		t.Errorf("alice's notes: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(alice)
	if len(entries) != 1 {
		t.Errorf("alice's folder holds %d entries; want only notes.txt", len(entries))
	}
	if _, err := os.Stat(filepath.Join(root, "bob-extra")); err == nil {
		t.Error("bob made a folder in the sessions' root")
	}
	if r := run(t.Context(), "alice", "cat notes.txt && id -u"); r.GetIsError() || !strings.Contains(client.Text(r), "alice-secret") {
		t.Errorf("alice's next command: %s", client.Text(r))
	} else if perSession {
		var st syscall.Stat_t
		if err := syscall.Stat(alice, &st); err != nil || !strings.Contains(client.Text(r), strconv.Itoa(int(st.Uid))) || st.Uid < 300000 || st.Uid > 300099 {
			t.Errorf("alice's command runs as %s; her folder belongs to %d (want a uid of sandbox.uid_range)", client.Text(r), st.Uid)
		}
	}
}

// profiles are the sandbox profiles this machine offers, with required
// mode: commands under the server's uid (the gap that leaves accepted);
// as root, a uid per session from uids too.
func profiles(uids string) map[string]sandbox.Config {
	p := map[string]sandbox.Config{"server uid": {Mode: sandbox.Required, Accept: []string{sandbox.GapOwnerFiles}}}
	if os.Getuid() == 0 {
		p["a uid per session"] = sandbox.Config{Mode: sandbox.Required, UIDRange: uids}
	}
	return p
}

// serveSessions serves the workspace tools, run_command among them, with a
// folder per session (a uid of its own for each when cfg's sandbox gives
// them) over a real loopback server, closed when the test ends.
func serveSessions(t *testing.T, cfg sandbox.Config) (*sandbox.Sandbox, *workspace.Sessions, string, *client.Client) {
	t.Helper()
	sb, _, err := sandbox.New(cfg)
	if err != nil {
		testenv.Missing(t, "a kernel that enforces the whole sandbox ("+err.Error()+")")
	}
	t.Cleanup(sb.Close)
	// A short folder of its own rather than t.TempDir(), whose name holds
	// the test's: a socket bound by absolute path in a session's folder
	// must fit sun_path (108 bytes) under any $TMPDIR (.ci/run's
	// unprivileged run uses a longer one).
	dir, err := os.MkdirTemp("", "tw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil { // the sessions' uids pass through it
		t.Fatal(err)
	}
	opts := workspace.SessionOptions{}
	if u := sb.UIDs(); u != nil {
		opts.UIDs = &workspace.IDRange{First: u.First, Last: u.Last}
	}
	s, err := workspace.OpenSessions(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := serveResolver(t, s, workspacetools.Options{RunCommand: true, Command: runcommand.Options{Shell: true, Sandbox: sb, KillGrace: 300 * time.Millisecond}})
	return sb, s, root, c
}

// metadata is what a command could change of path: mode, owner, times.
func metadata(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("mode %o owner %d:%d mtime %d.%d", st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
}

// TestEscapeMaxProcessesTooSmall checks that a command that cannot start a
// process because its uid is at max_processes (with the server's uid, the
// server's own threads count) gets a result naming the limit, not only the
// bare EAGAIN, so the model and the operator can tell why. Root is not
// bound by the limit; .ci/run runs the TestEscape tests as nobody.
func TestEscapeMaxProcessesTooSmall(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("root is not bound by RLIMIT_NPROC; .ci/run runs this as nobody")
	}
	t.Parallel()
	sb, _, err := sandbox.New(sandbox.Config{Mode: sandbox.Required, Accept: []string{sandbox.GapOwnerFiles}, MaxProcesses: 1})
	if err != nil {
		testenv.Missing(t, "a kernel that enforces the whole sandbox ("+err.Error()+")")
	}
	t.Cleanup(sb.Close)
	c := wt.NewCorpus(t)
	tool := runcommand.New(c.WS, runcommand.Options{Shell: true, Sandbox: sb})
	res := wt.Call(t, tool, `{"command":"echo ran; (echo child)"}`)
	if text := wt.Text(res); !res.IsError || !strings.Contains(text, "ork") || !strings.Contains(text, "sandbox.max_processes: 1") {
		t.Errorf("result (error %v):\n%s\nwant an error naming sandbox.max_processes: 1", res.IsError, text)
	}
}

// searchableTempDir is a t.TempDir() that every uid may read and search,
// with the folder t.TempDir() makes it in: a read-only path the commands
// of a session's uid read.
func searchableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mqOpen opens (with flags, unix.O_CREAT to make it) the POSIX message
// queue name, as mq_open(3) does without its leading slash.
func mqOpen(name string, flags int) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_RDWR|unix.O_CLOEXEC), 0o600, 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// mqUnlink removes the POSIX message queue name.
func mqUnlink(name string) {
	if p, err := unix.BytePtrFromString(name); err == nil {
		unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(p)), 0, 0)
	}
}
