package supervisor

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// watch is the supervisor's watchdog over the command's whole tree: it
// samples it every few tens of milliseconds, reports it to the server (so
// the server can end it should the supervisor die), and enforces the
// aggregate limits the kernel's per-process ones miss — memory and
// processes across the tree, when no cgroup does, and the bytes and files
// under the call's roots (the workspace and its TMPDIR), with the files the
// tree holds open after deleting them.
type watch struct {
	limits Limits
	roots  []string
	cgroup string
	every  time.Duration
	page   uint64

	fsNext  time.Time     // when the roots are measured next
	fsEvery time.Duration // how long after that: 20 times the last walk, 250 ms to 10 s
	sent    []Proc        // the tree as last reported
}

func newWatch(setup Setup, sp Spec) *watch {
	every := 100 * time.Millisecond
	if setup.WatchMillis > 0 {
		every = time.Duration(setup.WatchMillis) * time.Millisecond
	}
	return &watch{limits: setup.Limits, roots: sp.Roots, cgroup: sp.Cgroup, every: every, page: uint64(os.Getpagesize()), fsEvery: 250 * time.Millisecond}
}

// check samples the tree and the roots, and returns the name of the
// aggregate limit exceeded, if any.
func (w *watch) check() string {
	procs, tasks, mem := w.sample()
	if !sameTree(procs, w.sent) {
		report(Report{Tree: procs[:min(len(procs), MaxTree)]})
		w.sent = procs
	}
	l := w.limits
	if w.cgroup == "" { // a cgroup holds these itself, and exactly
		if l.MemoryBytes > 0 && mem > l.MemoryBytes {
			return "memory_bytes"
		}
		if l.MaxProcesses > 0 && tasks > l.MaxProcesses {
			return "max_processes"
		}
	}
	if (l.MaxWorkspaceBytes > 0 || l.MaxWorkspaceFiles > 0) && !time.Now().Before(w.fsNext) {
		start := time.Now()
		size, files := usage(w.roots, l.MaxWorkspaceBytes, l.MaxWorkspaceFiles)
		size += heldOpen(procs, map[[2]uint64]bool{})
		w.fsEvery = min(max(20*time.Since(start), 250*time.Millisecond), 10*time.Second)
		w.fsNext = time.Now().Add(w.fsEvery)
		switch {
		case l.MaxWorkspaceBytes > 0 && size > l.MaxWorkspaceBytes:
			return "max_workspace_bytes"
		case l.MaxWorkspaceFiles > 0 && files > l.MaxWorkspaceFiles:
			return "max_workspace_files"
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
// anonymous pages of a fork count in each: an upper bound).
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

// heldOpen measures the files the tree holds open that no folder shows: a
// file deleted while open, O_TMPFILE, memfd_create. The workspace walk
// cannot see them, yet they fill the disk (or, on tmpfs and for memfd,
// memory) as much as any other file.
func heldOpen(procs []Proc, seen map[[2]uint64]bool) (size uint64) {
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
			if !seen[k] {
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

// usage measures the roots: bytes allocated (a file with several links
// once) and entries, stopping once past either limit. A folder its owner
// made unreadable, which would hide what it holds, gets its owner's rights
// back and is measured too: the supervisor has the command's uid.
func usage(roots []string, maxBytes, maxFiles uint64) (size, files uint64) {
	u := &measure{maxBytes: maxBytes, maxFiles: maxFiles, seen: map[[2]uint64]bool{}}
	for _, root := range roots {
		if u.walk(root) {
			break
		}
	}
	return u.size, u.files
}

type measure struct {
	maxBytes, maxFiles uint64
	size, files        uint64
	seen               map[[2]uint64]bool // files with several links, counted once
}

func (u *measure) over() bool {
	return (u.maxBytes > 0 && u.size > u.maxBytes) || (u.maxFiles > 0 && u.files > u.maxFiles)
}

// walk measures the tree at root and reports whether a limit was passed.
func (u *measure) walk(root string) bool {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != root && d != nil && d.IsDir() && errors.Is(err, fs.ErrPermission) && os.Chmod(p, 0o700) == nil && u.walk(p) {
				return fs.SkipAll
			}
			return nil
		}
		u.files++
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 && !info.IsDir() {
				k := [2]uint64{st.Dev, st.Ino}
				if u.seen[k] {
					return nil
				}
				u.seen[k] = true
			}
			u.size += uint64(st.Blocks) * 512
		}
		if u.over() {
			return fs.SkipAll
		}
		return nil
	})
	return u.over()
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
