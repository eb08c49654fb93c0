package workspacetools_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// hidePy is the third containment pass's Python helper (issue 30): ways
// to hold disk or memory where the call's accounting might not look, to
// change or lock files outside the roots through a descriptor, and to
// make the supervisor work. Each either fails with Python's own error, or
// holds what it made until the sandbox ends it, or prints what it saw.
const hidePy = `import array, ctypes, fcntl, mmap, os, socket, struct, sys, threading, time
op, args = sys.argv[1], sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, what + ": " + os.strerror(e))
MB = 1 << 20
def fill(fd, mb):
    chunk = b"\x01" * MB
    for i in range(mb):
        os.write(fd, chunk)
def make(kind, n, mb):
    fds = []
    for i in range(n):
        if kind == "memfd":
            fd = os.memfd_create("hide%d" % i)
        elif kind == "tmpfile":
            fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
        else:  # deleted, mapped
            fd = os.open("hide%d" % i, os.O_CREAT | os.O_RDWR, 0o600)
        fill(fd, mb)
        if kind in ("deleted", "mapped"):
            os.unlink("hide%d" % i)
        if kind == "mapped":
            fds.append(mmap.mmap(fd, 4096))
            os.close(fd)
            continue
        fds.append(fd)
    return fds
def inflight(fds):
    a, b = socket.socketpair()
    for fd in fds:
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        os.close(fd)
    return a, b
def chain(levels, width):
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    for i in range(levels):
        name = ("%03d" % i) * (width // 3)
        os.mkdir(name, dir_fd=fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    return fd
if op == "hold":  # what the process was given, through its exec
    time.sleep(30)
elif op == "dumpable":
    check(libc.prctl(4, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE, 0)")
elif op == "make":  # kind n mb: made and held here
    held = make(args[0], int(args[1]), int(args[2]))
    time.sleep(30)
elif op == "inflight":  # kind n mb: made, sent into a socket, closed
    held = inflight(make(args[0], int(args[1]), int(args[2])))
    time.sleep(30)
elif op == "exec-hidden":  # kind n mb: made, then held by ./py, which may not read itself (not dumpable)
    for fd in make(args[0], int(args[1]), int(args[2])):
        os.set_inheritable(fd, True)
    os.execv("./py", ["./py", "hide.py", "hold"])
elif op == "exec-unlink":  # n mb: files made and opened here, unlinked by ./py (not dumpable)
    for i in range(int(args[0])):
        fd = os.open("named%d" % i, os.O_CREAT | os.O_RDWR, 0o600)
        fill(fd, int(args[1]))
        os.set_inheritable(fd, True)
    os.execv("./py", ["./py", "hide.py", "unlink-held", args[0]])
elif op == "unlink-held":
    for i in range(int(args[0])):
        os.unlink("named%d" % i)
    time.sleep(30)
elif op == "renamed-over":  # n mb
    held = []
    for i in range(int(args[0])):
        fd = os.open("big%d" % i, os.O_CREAT | os.O_RDWR, 0o600)
        fill(fd, int(args[1]))
        held.append(fd)
        open("small", "w").write("x")
        os.rename("small", "big%d" % i)
    time.sleep(30)
elif op == "opath":  # mb: a file held by an O_PATH descriptor alone
    fd = os.open("opath", os.O_CREAT | os.O_RDWR, 0o600)
    fill(fd, int(args[0]))
    p = os.open("opath", os.O_PATH)
    os.close(fd)
    os.unlink("opath")
    time.sleep(1)
    print("path-held blocks %d" % os.fstat(p).st_blocks)
    sys.exit(0)
elif op == "deep":  # levels width mb files: below a chain of folders
    fd = chain(int(args[0]), int(args[1]))
    for i in range(int(args[3])):
        f = os.open("f%d" % i, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)
        if int(args[2]):
            fill(f, int(args[2]))
        os.close(f)
    if len(args) > 4:  # then every folder of the chain unreadable, from the bottom up
        for i in range(int(args[0])):
            up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            name = ("%03d" % (int(args[0]) - 1 - i)) * (int(args[1]) // 3)
            os.chmod(name, int(args[4], 8), dir_fd=up)
            fd = up
    print("TMPDIR " + os.environ.get("TMPDIR", ""))
    sys.stdout.flush()
    if os.getcwd() != os.environ.get("TMPDIR"):
        time.sleep(30)
    sys.exit(0)
elif op == "ioctl":  # path request: an ioctl on a descriptor open for reading
    fd = os.open(args[0], os.O_RDONLY)
    buf = ctypes.create_string_buffer(256)
    check(libc.ioctl(fd, ctypes.c_ulong(int(args[1], 16)), buf), "ioctl " + args[1])
elif op == "fcntl":  # path cmd arg
    fd = os.open(args[0], os.O_RDONLY)
    check(libc.fcntl(fd, int(args[1]), ctypes.c_long(int(args[2]))), "fcntl %s" % args[1])
elif op == "rdlock":  # path cmd: a read lock by fcntl (F_SETLK 6, F_OFD_SETLK 37)
    fd = os.open(args[0], os.O_RDONLY)
    fcntl.fcntl(fd, int(args[1]), struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 0, 0))
    print("locked")
    time.sleep(2)
elif op == "lock-race":  # outside: swap the descriptor a read lock is asked on; hold a lock that lands outside
    inside = os.open("mine", os.O_CREAT | os.O_RDWR, 0o600)
    outside = os.open(args[0], os.O_RDONLY)
    st = os.fstat(outside)
    mine = "POSIX  ADVISORY  READ %d %02x:%02x:%d " % (os.getpid(), os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    n = os.dup(inside)
    for i in range(300):
        done = []
        def swap():
            while not done:
                os.dup2(outside, n)
                os.dup2(inside, n)
        th = threading.Thread(target=swap); th.start()
        for j in range(20):
            try:
                fcntl.fcntl(n, fcntl.F_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 0, 0))
            except OSError:
                pass
        done.append(1); th.join()
        if any(mine in line for line in open("/proc/locks")):
            print("holding a read lock outside"); sys.stdout.flush()
            time.sleep(10)
    print("the race never held a lock outside")
    sys.exit(0)
elif op == "lock-here":  # record and open-file locks in the workspace
    fd = os.open("lockhere", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    r = os.open("lockhere2", os.O_CREAT | os.O_RDONLY, 0o600)
    fcntl.fcntl(r, fcntl.F_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 0, 0))
    fcntl.fcntl(r, 37, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 10, 10, 0))
    print("locks in the workspace work")
    sys.exit(0)
elif op == "fd-change":  # path what: change a file through a descriptor open for reading
    fd = os.open(args[0], os.O_RDONLY)
    what = args[1]
    if what == "fchmod": os.fchmod(fd, 0o666)
    elif what == "fchown": os.fchown(fd, os.getuid(), os.getgid())
    elif what == "futimens": os.utime(fd, (0, 0))
    elif what == "fsetxattr": os.setxattr(fd, "user.toolwire", b"x")
    elif what == "fallocate": os.posix_fallocate(fd, 0, 1 << 20)
    elif what == "ftruncate": os.ftruncate(fd, 0)
elif op == "bind":  # a Unix socket by absolute path in the working folder
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.abspath("listen.sock"))
    s.listen()
    c = socket.socket(socket.AF_UNIX)
    c.connect(os.path.abspath("listen.sock"))
    s.accept()
    print("bound and connected")
    for line in open("/proc/net/unix"):
        if "listen.sock" in line:
            print("in /proc/net/unix: " + line.split()[-1])
    sys.exit(0)
elif op == "chmod-loop":  # n: chmods of one file, each mediated
    open("chmodded", "a").close()
    for i in range(int(args[0])):
        os.chmod("chmodded", 0o600 | (i & 0o66))
    sys.exit(0)
print("ESCAPED-" + op)
`

// sessionRunner runs commands in sessions of a server with a folder per
// session (serveSessions).
type sessionRunner struct {
	t    *testing.T
	sb   *sandbox.Sandbox
	s    *workspace.Sessions
	root string
	c    *client.Client
}

func (r sessionRunner) run(ctx context.Context, session, command string) *toolwirev1.CallResult {
	r.t.Helper()
	b, err := client.Collect(r.c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{SessionId: session, Calls: []*toolwirev1.ToolCall{
		client.Call("c", "run_command", map[string]any{"command": command}),
	}}))
	if err != nil {
		r.t.Fatal(err)
	}
	return b.Results[0]
}

// folder makes session's folder (its first command) and puts hide.py in
// it, owned as the folder is.
func (r sessionRunner) folder(session string) string {
	r.t.Helper()
	if res := r.run(r.t.Context(), session, "true"); res.GetIsError() {
		r.t.Fatalf("%s: %s", session, client.Text(res))
	}
	dir := filepath.Join(r.root, r.s.FolderName("", session))
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		r.t.Fatal(err)
	}
	file := filepath.Join(dir, "hide.py")
	if err := os.WriteFile(file, []byte(hidePy), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Lchown(file, int(st.Uid), int(st.Gid)); err != nil {
		r.t.Fatal(err)
	}
	return dir
}

// attempt is one try at the sandbox: a shell command and the outcomes
// that show it failed (nil: any, but no trace).
type attempt struct {
	name, command string
	want          []string
	check         func(t *testing.T, dir, text string)
}

func limitOf(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, "sandbox."+n)
	}
	return out
}

// runAttempts runs each attempt in a session of its own, so that what one
// leaves does not count against the next, and checks its result.
func (r sessionRunner) runAttempts(t *testing.T, attempts []attempt) {
	for i, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			session := fmt.Sprintf("attempt-%d", i)
			dir := r.folder(session)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			res := r.run(ctx, session, a.command)
			text := client.Text(res)
			if strings.Contains(text, "ESCAPED-") {
				t.Errorf("escaped:\n%s", text)
			}
			if a.want != nil {
				ok := false
				for _, w := range a.want {
					ok = ok || strings.Contains(text, w)
				}
				if !ok {
					t.Errorf("result (error %v):\n%s\nwant one of %q", res.GetIsError(), text, a.want)
				}
			}
			if strings.Contains(text, "supervisor ended without reporting") {
				t.Errorf("the supervisor died:\n%s", text)
			}
			for _, m := range []string{"sleep\x00742", "hide.py"} {
				if left := processesLeft(t, m); len(left) > 0 {
					t.Errorf("processes outlived the call: %q", left)
				}
			}
			if a.check != nil {
				a.check(t, dir, text)
			}
			t.Logf("%s", text)
		})
	}
}

// processesLeft lists the processes whose command line holds marker, once
// they have had a moment to go (the supervisor reports before the last
// ones are reaped by the kernel): it waits for them until just before the
// test's deadline, since they must go, and a fixed while (it was 5s) is
// one a loaded machine can outlast.
func processesLeft(t *testing.T, marker string) []string {
	for deadline := testenv.Deadline(t); ; time.Sleep(10 * time.Millisecond) {
		left := testenv.Processes(marker)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// removeTree removes dir with all it holds whatever its folders' modes, as
// the owner may (the test's own uid or root).
func removeTree(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("sh", "-c", `chmod -R u+rwx "$1" 2>/dev/null; rm -rf "$1"`, "sh", dir).CombinedOutput(); err != nil {
		t.Errorf("removing %s: %v %s", dir, err, out)
	}
}

// TestEscapeHiddenUsage holds disk and memory where the call's accounting
// might not look (issue 30, part 1): files without a name (memfds,
// O_TMPFILE, deleted files) held by a process that is not dumpable,
// behind a memory mapping, in flight in a Unix socket, or by an O_PATH
// descriptor alone; a folder chain deeper than PATH_MAX, unreadable too;
// a TMPDIR left with unreadable folders and such a chain; and the
// supervisor made to spend CPU on mediated calls. Each ends with the limit
// it passed, or fails with the command's own error, in every profile.
func TestEscapeHiddenUsage(t *testing.T) {
	testenv.LookPath(t, "python3")
	for name, cfg := range profiles("300200-300249") {
		// Not in parallel: each attempt looks for its processes by their
		// command lines, which the profiles share.
		t.Run(name, func(t *testing.T) {
			cfg.MaxWorkspaceBytes = 32 << 20
			cfg.MaxWorkspaceFiles = 2000
			cfg.MaxFileBytes = 64 << 20
			// Not a tight CPU limit: the kernel's work for a command counts,
			// and an ext4 without a journal (this project's machines)
			// charges each file or folder made a scan past the inodes
			// deleted in the last minute, by anyone: 3000 files cost a
			// command 1.3-3.4 s. The supervisor's CPU has its own below.
			cfg.CPUSeconds = 60
			sb, s, root, c := serveSessions(t, cfg)
			r := sessionRunner{t: t, sb: sb, s: s, root: root, c: c}
			bytesLimit := limitOf("max_workspace_bytes")
			denied := []string{"Permission denied", "Operation not permitted"}
			unreadable := "cp $(command -v python3) py && chmod 0111 py && "
			tmpdirGone := func(t *testing.T, dir, text string) {
				for _, line := range strings.Split(text, "\n") {
					if tmp, ok := strings.CutPrefix(line, "TMPDIR "); ok {
						if tmp == "" {
							t.Errorf("no TMPDIR in:\n%s", text)
						} else if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
							t.Errorf("the call's TMPDIR %s is still there: %v", tmp, err)
							removeTree(t, tmp)
						}
						return
					}
				}
				t.Errorf("the command did not say its TMPDIR:\n%s", text)
			}
			cleanDeep := func(t *testing.T, dir, text string) { removeTree(t, dir) }
			r.runAttempts(t, []attempt{
				{"made not dumpable by prctl", "python3 hide.py dumpable", denied, nil},
				{"memfds held", "python3 hide.py make memfd 4 12", bytesLimit, nil},
				{"memfds held by a process that is not dumpable", unreadable + "python3 hide.py exec-hidden memfd 4 12", bytesLimit, nil},
				{"deleted files held by a process that is not dumpable", unreadable + "python3 hide.py exec-hidden deleted 4 12", bytesLimit, nil},
				{"O_TMPFILE files held by a process that is not dumpable", unreadable + "python3 hide.py exec-hidden tmpfile 4 12", bytesLimit, nil},
				{"memfds made by a process that is not dumpable", unreadable + "./py hide.py make memfd 4 12", append(denied, bytesLimit...), nil},
				{"files unlinked by a process that is not dumpable", unreadable + "python3 hide.py exec-unlink 4 12", append(denied, bytesLimit...), nil},
				{"deleted files behind memory mappings", "python3 hide.py make mapped 4 12", bytesLimit, nil},
				{"memfds in flight in a Unix socket", "python3 hide.py inflight memfd 4 12", bytesLimit, nil},
				{"deleted files in flight in a Unix socket", "python3 hide.py inflight deleted 4 12", bytesLimit, nil},
				{"O_TMPFILE files in flight in a Unix socket", "python3 hide.py inflight tmpfile 4 12", bytesLimit, nil},
				{"files renamed over while held", "python3 hide.py renamed-over 4 12", bytesLimit, nil},
				{"a file held by an O_PATH descriptor alone", "python3 hide.py opath 20", []string{"path-held blocks 0"}, nil},
				{"bytes below a chain deeper than PATH_MAX", "python3 hide.py deep 22 200 12 4", bytesLimit, cleanDeep},
				{"files below a chain deeper than PATH_MAX", "python3 hide.py deep 22 200 0 3000", limitOf("max_workspace_files"), cleanDeep},
				{"bytes below an unreadable chain deeper than PATH_MAX", "python3 hide.py deep 22 200 12 4 0300", bytesLimit, cleanDeep},
				{"bytes below a chain of folders no one may enter", "python3 hide.py deep 40 3 12 4 0000", bytesLimit, cleanDeep},
				{"a TMPDIR left with a deep chain of unreadable folders", "cd $TMPDIR && python3 $OLDPWD/hide.py deep 22 200 1 3 0300", []string{"TMPDIR /"}, tmpdirGone},
				{"a TMPDIR made unreadable", `echo "TMPDIR $TMPDIR"; mkdir -p $TMPDIR/a/b && touch $TMPDIR/a/b/f && chmod 0 $TMPDIR/a/b $TMPDIR/a $TMPDIR`, []string{"TMPDIR /"}, tmpdirGone},
			})
			cpu := cfg
			cpu.CPUSeconds = 2
			if cpu.UIDRange != "" {
				cpu.UIDRange = "300250-300299"
			}
			sb, s, root, c = serveSessions(t, cpu)
			r = sessionRunner{t: t, sb: sb, s: s, root: root, c: c}
			r.runAttempts(t, []attempt{
				{"the supervisor made to spend CPU", "for i in $(seq 16); do python3 hide.py chmod-loop 30000 & done; wait", []string{"supervisor spent"}, nil},
			})
		})
	}
}

// fsVersion reads a file's generation (FS_IOC_GETVERSION), or -1 where the
// file system has none.
func fsVersion(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var v int64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), 0x80087601, uintptr(unsafe.Pointer(&v))); e != 0 {
		return -1
	}
	return v
}

// TestEscapeOutsideChanges changes and locks files outside the roots
// through descriptors (issue 30, part 2): ioctls and fcntls are an
// allow-list, leases are refused, locks are only beneath the roots (a
// record lock that a racing thread moves outside ends the call), and
// every other call that changes an inode through a descriptor is refused;
// and a Unix socket bound by absolute path leaves no folder name in
// /proc/net/unix (part 3). Locks in the workspace keep working.
func TestEscapeOutsideChanges(t *testing.T) {
	testenv.LookPath(t, "python3")
	for name, cfg := range profiles("300300-300399") {
		t.Run(name, func(t *testing.T) { // not in parallel, as above
			// Files a command may read and must not change or lock: owned
			// by the server's uid (the commands' too, in this profile), on
			// the test's file system.
			ro := searchableTempDir(t)
			file := filepath.Join(ro, "passwd")
			if err := os.WriteFile(file, []byte("read-only\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg.ReadOnlyPaths = append(slices.Clone(sandbox.DefaultReadOnlyPaths), ro)
			sb, s, root, c := serveSessions(t, cfg)
			r := sessionRunner{t: t, sb: sb, s: s, root: root, c: c}
			before, version := metadata(t, file), fsVersion(t, file)
			denied := []string{"Permission denied", "Operation not permitted"}
			fd := []string{"Permission denied", "Operation not permitted", "Bad file descriptor", "Invalid argument"}
			unchanged := func(t *testing.T, dir, text string) {
				if got := metadata(t, file); got != before {
					t.Errorf("%s: %s; was %s", file, got, before)
				}
				if got := fsVersion(t, file); got != version {
					t.Errorf("%s: generation %d; was %d", file, got, version)
				}
				// No lock or lease is left on it: a writer may open it and
				// lock it at once.
				f, err := os.OpenFile(file, os.O_WRONLY|syscall.O_NONBLOCK, 0)
				if err != nil {
					t.Errorf("opening %s for writing: %v", file, err)
					return
				}
				defer f.Close()
				if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK}); err != nil {
					t.Errorf("locking %s: %v", file, err)
				}
			}
			noFolderName := func(t *testing.T, dir, text string) {
				if !strings.Contains(text, "in /proc/net/unix: listen.sock") || strings.Contains(text, filepath.Base(dir)) {
					t.Errorf("what /proc/net/unix showed while the socket was bound:\n%s\nwant listen.sock, and not the session's folder %s", text, filepath.Base(dir))
				}
			}
			attempts := []attempt{
				{"FS_IOC_SETVERSION", "python3 hide.py ioctl " + file + " 40087602", denied, unchanged},
				{"FS_IOC_SETVERSION, 32-bit", "python3 hide.py ioctl " + file + " 40047602", denied, unchanged},
				{"FS_IOC_SETFLAGS", "python3 hide.py ioctl " + file + " 40086602", denied, unchanged},
				{"FS_IOC_FSSETXATTR", "python3 hide.py ioctl " + file + " 401c5820", denied, unchanged},
				{"FS_IOC_ENABLE_VERITY", "python3 hide.py ioctl " + file + " 40806685", denied, unchanged},
				{"FIDEDUPERANGE", "python3 hide.py ioctl " + file + " c0189436", denied, unchanged},
				{"an ioctl no one knows", "python3 hide.py ioctl " + file + " 4004ff01", denied, unchanged},
				{"F_SETLEASE read", "python3 hide.py fcntl " + file + " 1024 0", denied, unchanged},
				{"F_SETLEASE write", "python3 hide.py fcntl " + file + " 1024 1", denied, unchanged},
				{"F_SET_RW_HINT", "python3 hide.py fcntl " + file + " 1036 0", denied, unchanged},
				{"a read record lock (F_SETLK)", "python3 hide.py rdlock " + file + " 6", denied, unchanged},
				{"a read open-file lock (F_OFD_SETLK)", "python3 hide.py rdlock " + file + " 37", denied, unchanged},
				{"a read record lock moved outside by a racing thread", "python3 hide.py lock-race " + file, []string{"it locked a file outside the workspace", "the race never held a lock outside"}, unchanged},
				{"fchmod", "python3 hide.py fd-change " + file + " fchmod", denied, unchanged},
				{"fchown", "python3 hide.py fd-change " + file + " fchown", denied, unchanged},
				{"futimens", "python3 hide.py fd-change " + file + " futimens", denied, unchanged},
				{"fsetxattr", "python3 hide.py fd-change " + file + " fsetxattr", denied, unchanged},
				{"fallocate", "python3 hide.py fd-change " + file + " fallocate", fd, unchanged},
				{"ftruncate", "python3 hide.py fd-change " + file + " ftruncate", fd, unchanged},
				{"locks in the workspace", "python3 hide.py lock-here", []string{"locks in the workspace work"}, nil},
				{"a Unix socket bound by absolute path", "python3 hide.py bind", []string{"bound and connected"}, noFolderName},
			}
			r.runAttempts(t, attempts)
		})
	}
}

// hog starts 60 sleeps, or as many as it may, then becomes a sleep
// itself: sleep 7425.PID and 7426.PID, PID this test binary's, so that the
// processes it counts are its own and not those of another run of these
// tests on the machine.
var (
	hogTag    = fmt.Sprint(os.Getpid())
	hogSleeps = "sleep\x007425." + hogTag + "\x00"
	hogBecame = "sleep\x007426." + hogTag + "\x00"
	hog       = fmt.Sprintf(hogScript, hogTag, hogTag)
	hogScript = `python3 -c '
import os, subprocess
held = []
for i in range(60):
    try:
        held.append(subprocess.Popen(["sleep", "7425.%s"]))
    except OSError as e:
        print("refused:", e)
        break
print("started", len(held), flush=True)
os.execvp("sleep", ["sleep", "7426.%s"])
'`
)

// TestEscapeProcessShare checks one call's processes cannot starve
// another's (issue 30, part 3): with one uid for every session (the
// server's; as nobody in .ci/run, where RLIMIT_NPROC counts it all), a
// call holding max_processes does not keep another session's pipeline
// from forking; the call itself is refused its fork past the limit. As
// root, with a uid per session, the same holds.
func TestEscapeProcessShare(t *testing.T) {
	for name, cfg := range profiles("300400-300499") {
		t.Run(name, func(t *testing.T) { // not in parallel, as above
			cfg.MaxProcesses = 40
			_, _, _, c := serveSessions(t, cfg)
			r := sessionRunner{t: t, c: c}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var wg sync.WaitGroup
			wg.Add(1)
			var held *toolwirev1.CallResult
			go func() {
				defer wg.Done()
				b, err := client.Collect(c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{SessionId: "hog", Calls: []*toolwirev1.ToolCall{
					client.Call("c", "run_command", map[string]any{"command": hog}),
				}}))
				if status.Code(err) != codes.Canceled && err != nil {
					t.Error(err)
				}
				if err == nil {
					held = b.Results[0]
				}
			}()
			// The hog holds its share: it stops at max_processes.
			for deadline := time.Now().Add(30 * time.Second); len(testenv.Processes(hogBecame)) == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the hog did not get going")
				}
			}
			if n := len(testenv.Processes(hogSleeps)); n < 30 || n > 40 {
				t.Errorf("the hog holds %d sleeps; want it stopped near max_processes 40", n)
			}
			// The pipeline runs in bash, whose SIGCHLD handler restarts an
			// interrupted system call (SA_RESTART): in dash, the first
			// child's exit can interrupt the second fork before the
			// supervisor has taken it, a kernel limit of mediated calls
			// that has nothing to do with the hog (docs/security.md, "What
			// it does not enforce"), which CI hit under load. bash retries
			// a fork refused for want of processes (EAGAIN), saying
			// "retry", so a share the hog starved still fails here.
			res := r.run(t.Context(), "other", "exec bash -c 'true | true; echo piped'")
			if text := client.Text(res); res.GetIsError() || !strings.Contains(text, "piped") || strings.Contains(text, "retry") {
				t.Errorf("another session beside the hog: %s", text)
			}
			cancel()
			wg.Wait()
			if held != nil {
				t.Errorf("the hog ended on its own: %s", client.Text(held))
			}
			if left := append(processesLeft(t, hogSleeps), processesLeft(t, hogBecame)...); len(left) > 0 {
				t.Errorf("the hog's processes outlived it: %q", left)
			}
		})
	}
}

// lockWaitPy holds a file locked and makes n threads wait for it, half by
// flock, half by an open-file lock (F_OFD_SETLKW); once each is waiting, it
// prints how many threads its parent, the supervisor, has. Then it waits
// for the lock itself, by each kind, until an alarm's handler interrupts
// the wait, as flock -w does.
const lockWaitPy = `import fcntl, os, signal, struct, sys, threading, time
n = int(sys.argv[1])
open("lk", "w").close()
held = open("lk", "r+")
fcntl.flock(held, fcntl.LOCK_EX)
fcntl.fcntl(held, fcntl.F_OFD_SETLK, struct.pack("hhqqixxxx", fcntl.F_WRLCK, 0, 0, 0, 0))
def wait(kind):
    f = open("lk", "r+")
    if kind == "flock":
        fcntl.flock(f, fcntl.LOCK_EX)
    else:
        fcntl.fcntl(f, fcntl.F_OFD_SETLKW, struct.pack("hhqqixxxx", fcntl.F_WRLCK, 0, 0, 0, 0))
    print("ESCAPED: took a held lock (" + kind + ")", flush=True)
for i in range(n):
    threading.Thread(target=wait, args=("flock" if i % 2 else "ofd",), daemon=True).start()
def waiting():
    k = 0
    for t in os.listdir("/proc/self/task"):
        try:
            nr = open("/proc/self/task/" + t + "/syscall").read().split()[0]
        except OSError:
            continue
        k += nr in ("72", "73")  # fcntl, flock
    return k
while waiting() < n:
    time.sleep(0.01)
for line in open("/proc/%d/status" % os.getppid()):
    if line.startswith("Threads:"):
        print("supervisor threads", line.split()[1], flush=True)
class Alarm(Exception):
    pass
def alarm(sig, frame):
    raise Alarm()
signal.signal(signal.SIGALRM, alarm)
for kind in ("flock", "ofd"):
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        wait(kind)
    except Alarm:
        print("interrupted", kind, flush=True)
os._exit(0)
`

// TestEscapeLockWaits makes 400 threads of a command wait for a lock its
// main thread holds. A lock the supervisor takes for the command used to be
// one blocking system call of the supervisor: each waiting thread of the
// command held one of the supervisor's threads, counted by no limit and
// kept by a warm supervisor for its next commands (900 waits left a
// supervisor with 911 threads), and a signal to the waiting thread did not
// end its wait, so flock -w and alarm-bounded waits waited for the lock's
// holder (5 s for a 1 s flock -w). Now the supervisor holds no thread
// while a lock is held elsewhere, and a signal the waiter catches ends its
// wait with EINTR. Nor do the waits' attempts, made at once by hundreds:
// each an answer at work on a thread, they made 70-81 threads (and 39 of
// 64 waits in a loaded CI run) before answers took turns (answerSlots).
func TestEscapeLockWaits(t *testing.T) {
	t.Parallel()
	tool := pythonInSandbox(t, "lockwait.py", lockWaitPy)
	// A guard only: without the fix the interrupted waits never end.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const waiters = 400
	var mu sync.Mutex
	var streamed strings.Builder
	res, err := wt.CallContext(ctx, t, tool, fmt.Sprintf(`{"argv":["python3","lockwait.py","%d"]}`, waiters), func(p tools.Progress) {
		mu.Lock()
		defer mu.Unlock()
		streamed.WriteString(p.Output)
	})
	mu.Lock()
	text := streamed.String()
	mu.Unlock()
	if err == nil {
		text = wt.Text(res)
	} else {
		t.Errorf("run_command: %v (a wait the alarm should have interrupted went on)", err)
	}
	threads := -1
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "supervisor threads "); ok {
			threads, _ = strconv.Atoi(v)
		}
	}
	if threads < 0 || threads >= 32 {
		t.Errorf("the supervisor had %d threads while %d of the command's waited for a lock; want fewer than 32:\n%s", threads, waiters, text)
	}
	for _, want := range []string{"interrupted flock", "interrupted ofd"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q: a caught signal did not end the wait:\n%s", want, text)
		}
	}
	if strings.Contains(text, "ESCAPED") {
		t.Errorf("a lock held by another open file was taken:\n%s", text)
	}
}

// connectWaitPy makes n threads connect to a Unix socket whose backlog is
// full, so that each waits in the supervisor's connect, and exits once
// each is waiting (or connected), saying how many threads its parent, the
// supervisor, has.
const connectWaitPy = `import os, socket, sys, threading, time
n = int(sys.argv[1])
s = socket.socket(socket.AF_UNIX)
s.bind("full.sock")
s.listen(0)
def connect():
    c = socket.socket(socket.AF_UNIX)
    c.connect("full.sock")
    time.sleep(3600)
for i in range(n):
    threading.Thread(target=connect, daemon=True).start()
def waiting():
    k = 0
    for t in os.listdir("/proc/self/task"):
        try:
            nr = open("/proc/self/task/" + t + "/syscall").read().split()[0]
        except OSError:
            continue
        k += nr in ("42", "230")  # connect; clock_nanosleep once connected
    return k
while waiting() < n:
    time.sleep(0.01)
for line in open("/proc/%d/status" % os.getppid()):
    if line.startswith("Threads:"):
        print("supervisor threads", line.split()[1], flush=True)
os._exit(0)
`

// TestEscapeWarmSupervisorThreads makes a command's threads wait in the
// supervisor's connect, then runs the next command: a warm supervisor kept
// every thread a command's mediated calls had made it start (200 blocked
// connects left one with 210), so the next command found it that large.
// Now a supervisor that grew past 32 threads exits after its command.
func TestEscapeWarmSupervisorThreads(t *testing.T) {
	t.Parallel()
	tool := pythonInSandbox(t, "connectwait.py", connectWaitPy)
	// supervisorThreads runs argv and reads the thread count it printed.
	supervisorThreads := func(argv string) int {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a guard only
		defer cancel()
		res, err := wt.CallContext(ctx, t, tool, `{"argv":`+argv+`}`, nil)
		if err != nil {
			t.Fatalf("run_command %s: %v", argv, err)
		}
		text := wt.Text(res)
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, "supervisor threads "); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatalf("no thread count in:\n%s", text)
		return 0
	}
	const waiters = 64
	if grown := supervisorThreads(fmt.Sprintf(`["python3","connectwait.py","%d"]`, waiters)); grown < waiters/2 {
		t.Fatalf("the supervisor had %d threads while %d connects waited; the test needs them to hold one each", grown, waiters)
	}
	// bash, not sh: dash's pipeline may say "Cannot fork" on a loaded
	// machine (a fork interrupted before the supervisor takes it; see
	// docs/security.md), which failed this test once in 8 runs at load 6.
	if n := supervisorThreads(`["bash","-c","echo supervisor threads $(grep Threads: /proc/$PPID/status | cut -f2)"]`); n > 32 {
		t.Errorf("the next command's supervisor has %d threads: it kept those the last command's connects made it start", n)
	}
}

// pythonInSandbox returns run_command, under a sandbox that enforces
// everything, in a workspace holding the Python script name.
func pythonInSandbox(t *testing.T, name, script string) tools.Tool {
	t.Helper()
	testenv.LookPath(t, "python3")
	sb, _, err := sandbox.New(sandbox.Config{Mode: sandbox.Required, Accept: []string{sandbox.GapOwnerFiles}})
	if err != nil {
		testenv.Missing(t, "a kernel that enforces the whole sandbox ("+err.Error()+")")
	}
	t.Cleanup(sb.Close)
	e := wt.New(t, map[string]string{name: script})
	return runcommand.New(e.WS, runcommand.Options{Sandbox: sb, KillGrace: 300 * time.Millisecond})
}
