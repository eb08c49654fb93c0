package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toolwire/toolwire/tools/workspace/usage"
)

// watch is the supervisor's watchdog over the command's whole tree: it
// samples it every few tens of milliseconds, reports it to the server (so
// the server can end it should the supervisor die), and enforces the
// aggregate limits the kernel's per-process ones miss: memory and
// processes across the tree, when no cgroup does; the bytes and files
// under the call's roots (the workspace and its TMPDIR), with the files
// without a name the tree holds (the ledger's, and any other a dumpable
// process of the tree holds open); the CPU the supervisor spends on the
// command's mediated system calls; no record lock on a file outside the
// roots; and the room left on the roots' file systems.
type watch struct {
	limits Limits
	roots  []string
	// minFree is the room each root's file system must keep (0: none),
	// looked at every sample with free (usage.Free; tests fake it).
	minFree uint64
	free    func(path string) (uint64, error)
	cgroup  string
	every   time.Duration
	ledger  *ledger
	procs   *procLimit
	locks   *lockGuard

	fsNext  time.Time     // when the roots are measured next
	fsEvery time.Duration // how long after that: 20 times the last walk, one sample to 10 s
	sent    []Proc        // the tree as last reported

	cpuStart time.Duration // the supervisor's CPU time when the command started
	ownCPU   time.Duration // the CPU time the watchdog's own samples took since
	detail   string        // what the limit it found was, for the result
}

func newWatch(setup Setup, sp Spec, l *ledger, p *procLimit, g *lockGuard) *watch {
	every := 100 * time.Millisecond
	if setup.WatchMillis > 0 {
		every = time.Duration(setup.WatchMillis) * time.Millisecond
	}
	return &watch{limits: setup.Limits, roots: sp.Roots, minFree: sp.MinFreeBytes, free: usage.Free, cgroup: sp.Cgroup, every: every,
		ledger: l, procs: p, locks: g, fsEvery: every, cpuStart: processCPU()}
}

// processCPU is the CPU time the supervisor (every thread) has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(1, &ru) != nil { // RUSAGE_THREAD
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// check samples the tree and the roots, and returns the name of the
// aggregate limit exceeded, if any. It runs on the supervisor's main
// thread (locked), whose CPU time is the watchdog's own.
func (w *watch) check() string {
	start := threadCPU()
	defer func() { w.ownCPU += threadCPU() - start }()
	at := w.procs.settle()
	procs, tasks, mem := w.sample()
	w.procs.sampled(tasks, at)
	if !sameTree(procs, w.sent) {
		report(Report{Tree: procs[:min(len(procs), MaxTree)]})
		w.sent = procs
	}
	l := w.limits
	_, memfds, _ := w.ledger.measure(false)
	if w.cgroup == "" { // a cgroup holds these itself, and exactly
		if l.MemoryBytes > 0 && mem+memfds > l.MemoryBytes {
			return "memory_bytes"
		}
		if l.MaxProcesses > 0 && tasks > l.MaxProcesses {
			return "max_processes"
		}
	}
	if l.CPUSeconds > 0 {
		// The supervisor's CPU time since the command started, less the
		// watchdog's own: what the command's mediated system calls cost.
		if spent := processCPU() - w.cpuStart - w.ownCPU - (threadCPU() - start); spent > time.Duration(l.CPUSeconds)*time.Second {
			w.detail = fmt.Sprintf("the supervisor spent %.1f s of CPU time on the command's mediated system calls", spent.Seconds())
			return "cpu_seconds"
		}
	}
	if w.locks.used.Load() {
		if f := w.outsideLock(procs); f != "" {
			w.detail = "a read record lock (fcntl F_SETLK) on " + f
			return "outside_lock"
		}
	}
	if w.minFree > 0 {
		if limit := w.lowOnRoom(); limit != "" {
			return limit
		}
	}
	if (l.MaxWorkspaceBytes > 0 || l.MaxWorkspaceFiles > 0) && !time.Now().Before(w.fsNext) {
		start := time.Now()
		u := usage.Measure(w.roots, l.MaxWorkspaceBytes, l.MaxWorkspaceFiles)
		size, files := u.Bytes, u.Files
		ledgered, _, keys := w.ledger.measure(true)
		size += ledgered + heldOpen(procs, keys)
		w.fsEvery = min(max(20*time.Since(start), w.every), 10*time.Second)
		w.fsNext = time.Now().Add(w.fsEvery)
		switch {
		case u.Lost:
			w.detail = "a folder nested deeper than " + strconv.Itoa(usage.KeepFDs) + " levels moved while the sandbox measured it"
			return "max_workspace_files"
		case l.MaxWorkspaceBytes > 0 && size > l.MaxWorkspaceBytes:
			return "max_workspace_bytes"
		case l.MaxWorkspaceFiles > 0 && files > l.MaxWorkspaceFiles:
			return "max_workspace_files"
		}
	}
	return ""
}

// lowOnRoom returns "workspace_min_free_bytes" when the file system of a
// root has less room left than minFree, naming the root and its room in
// w.detail. A statfs costs a few microseconds, so every sample looks:
// unlike a walk of the roots, it does not grow with what they hold.
func (w *watch) lowOnRoom() string {
	for _, root := range w.roots {
		free, err := w.free(root)
		if err == nil && free < w.minFree {
			w.detail = fmt.Sprintf("the file system holding %s has %d bytes left", root, free)
			return "workspace_min_free_bytes"
		}
	}
	return ""
}

// outsideLock looks in /proc/locks for a record lock a process of the tree
// holds for reading on a file the mediator did not check (a thread that
// raced it): it names the file's device and inode, or returns "".
func (w *watch) outsideLock(procs []Proc) string {
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return ""
	}
	pids := make(map[string]bool, len(procs))
	for _, p := range procs {
		pids[strconv.Itoa(p.PID)] = true
	}
	// 1: POSIX  ADVISORY  READ 1234 08:01:5678 0 EOF
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) < 6 || f[1] != "POSIX" || f[3] != "READ" || !pids[f[4]] {
			continue
		}
		id := strings.Split(f[5], ":")
		if len(id) != 3 {
			continue
		}
		major, err1 := strconv.ParseUint(id[0], 16, 32)
		minor, err2 := strconv.ParseUint(id[1], 16, 32)
		ino, err3 := strconv.ParseUint(id[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil && !w.locks.ok(uint32(major), uint32(minor), ino) {
			return "the file with device:inode " + f[5]
		}
	}
	return ""
}

// close notes, from the cgroup, a memory limit the kernel enforced.
func (w *watch) close(e *Exit) {
	if w.cgroup == "" || e.Limit != "" {
		return
	}
	if b, err := os.ReadFile(w.cgroup + "/memory.events"); err == nil && eventCount(b, "oom_kill") > 0 {
		e.Limit = "memory_bytes"
	}
}

// eventCount reads one counter of a cgroup's *.events file.
func eventCount(b []byte, key string) uint64 {
	for line := range bytes.Lines(b) {
		if f := strings.Fields(string(line)); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// sample lists the supervisor's descendants with their start times, and
// counts their tasks (processes and threads, as RLIMIT_NPROC does) and
// the memory they hold: anonymous and shared-memory pages (file pages are
// the page cache's, which the kernel reclaims; counted per process, shared
// anonymous pages of a fork count in each: an upper bound). /proc/PID/stat
// and status need no access to the process, so a process that is not
// dumpable is counted too.
func (w *watch) sample() (procs []Proc, tasks, mem uint64) {
	for _, pid := range descendants(os.Getpid()) {
		dir := "/proc/" + strconv.Itoa(pid)
		b, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue
		}
		f := statFields(b)
		if len(f) < 22 {
			continue
		}
		// After "pid (comm)": state(0) ppid ... num_threads(17) itrealvalue starttime(19)
		threads, _ := strconv.ParseUint(f[17], 10, 64)
		start, _ := strconv.ParseUint(f[19], 10, 64)
		procs = append(procs, Proc{PID: pid, Start: start})
		tasks += max(threads, 1)
		if status, err := os.ReadFile(dir + "/status"); err == nil {
			mem += statusKB(status, "RssAnon:") << 10
			mem += statusKB(status, "RssShmem:") << 10
		}
	}
	return procs, tasks, mem
}

// statusKB reads one "Key:   N kB" line of /proc/PID/status.
func statusKB(status []byte, key string) uint64 {
	i := bytes.Index(status, []byte(key))
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(status[i+len(key) : i+len(key)+min(32, len(status)-i-len(key))]))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseUint(f[0], 10, 64)
	return n
}

// heldOpen measures the files without a name that processes of the tree
// hold open and the ledger does not hold (skip): a backstop for files
// another call or the server took the name of. It sees the fd tables of
// dumpable processes only.
func heldOpen(procs []Proc, skip map[[2]uint64]bool) (size uint64) {
	seen := map[[2]uint64]bool{}
	for _, p := range procs {
		dir := "/proc/" + strconv.Itoa(p.PID) + "/fd/"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			var st syscall.Stat_t
			if syscall.Stat(dir+fd.Name(), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 0 {
				continue
			}
			k := [2]uint64{st.Dev, st.Ino}
			if !seen[k] && !skip[k] {
				seen[k] = true
				size += uint64(st.Blocks) * 512
			}
		}
	}
	return size
}

// statFields splits /proc/PID/stat after the command name, which may hold
// spaces and parentheses.
func statFields(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// StartTime is a process's start time as /proc/PID/stat gives it, or 0.
func StartTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := statFields(b)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// descendants lists the processes whose parent chain leads to root, from
// each process's children files where the kernel has them (one read per
// descendant), else from every process's stat.
func descendants(root int) []int {
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children"); err == nil {
		var out []int
		queue := []int{root}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
			for _, t := range tasks {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
				for _, f := range strings.Fields(string(b)) {
					if c, err := strconv.Atoi(f); err == nil {
						out = append(out, c)
						queue = append(queue, c)
					}
				}
			}
		}
		return out
	}
	return scanDescendants(root)
}

// scanDescendants is descendants from every process's stat.
func scanDescendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := statFields(b)
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
