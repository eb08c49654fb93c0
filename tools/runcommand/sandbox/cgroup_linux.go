package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cgroups is the delegated cgroup v2 subtree the sandbox puts each call's
// command in (memory.max and pids.max over its whole tree, cgroup.kill as a
// backstop), when the server's own cgroup is delegated to it: a cgroup v2
// with the memory and pids controllers, writable by the server. The server
// first moves its own processes into a leaf of their own
// (toolwire-server), since a cgroup that hands controllers to its children
// may hold no processes itself; each call then gets a sibling
// (toolwire-call-N), removed after it. Without one, the supervisor's
// watchdog enforces the same limits by sampling the tree.
type cgroups struct {
	dir       string // the delegated cgroup's folder
	memory    uint64 // memory.max of each call (0: max)
	processes uint64 // pids.max of each call (0: max)
	n         atomic.Uint64
}

// findCgroups returns the calls' cgroups and "cgroup", or nil and
// "watchdog" when no delegated cgroup v2 is available here.
func findCgroups(cfg Config) (*cgroups, string) {
	mountinfo, err1 := os.ReadFile("/proc/self/mountinfo")
	self, err2 := os.ReadFile("/proc/self/cgroup")
	if err1 != nil || err2 != nil {
		return nil, "watchdog"
	}
	cg, err := delegated(mountinfo, self, "")
	if err == nil {
		err = cg.claim()
	}
	if err != nil {
		return nil, "watchdog"
	}
	cg.memory, cg.processes = cfg.MemoryBytes, cfg.MaxProcesses
	return cg, "cgroup"
}

// delegated finds the process's cgroup v2 folder from /proc/self/mountinfo
// and /proc/self/cgroup, under prefix (a fake root, in tests), and checks
// that it can hand the memory and pids controllers to children the server
// makes. It changes nothing.
func delegated(mountinfo, self []byte, prefix string) (*cgroups, error) {
	var path string
	for line := range bytes.Lines(self) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return nil, errors.New("the process is in no cgroup v2 hierarchy")
	}
	mount, root := "", ""
	for line := range bytes.Lines(mountinfo) {
		// id parent major:minor root mount-point options [optional...] - type source super-options
		f := strings.Fields(string(line))
		if i := indexOf(f, "-"); i >= 5 && i+1 < len(f) && f[i+1] == "cgroup2" {
			root, mount = f[3], f[4]
			break
		}
	}
	if mount == "" {
		return nil, errors.New("no cgroup v2 file system is mounted")
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("the process's cgroup %s is outside the mounted cgroup2 (%s)", path, root)
	}
	dir := filepath.Join(prefix, mount, rel)
	// The hierarchy's root cgroup (the kernel gives it no cgroup.type) is
	// the machine's, never delegated: a server in it as root could write
	// there, and claim would move every process of the machine (init
	// among them) into its leaf. A cgroup namespace's root, as a container
	// sees its own cgroup, is not the hierarchy's and has the file.
	if _, err := os.Stat(filepath.Join(dir, "cgroup.type")); err != nil {
		return nil, fmt.Errorf("the process's cgroup %s is the root of the cgroup v2 hierarchy (no cgroup.type), which is the machine's, not delegated", dir)
	}
	controllers, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	have := strings.Fields(string(controllers))
	if indexOf(have, "memory") < 0 || indexOf(have, "pids") < 0 {
		return nil, fmt.Errorf("the cgroup %s has no memory and pids controllers (it has %q)", dir, have)
	}
	for _, f := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control")} {
		if err := unix.Access(f, unix.W_OK); err != nil {
			return nil, fmt.Errorf("the cgroup %s is not delegated to this server: %s: %v", dir, f, err)
		}
	}
	return &cgroups{dir: dir}, nil
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// claim moves the delegated cgroup's processes (the server's) into a leaf
// of their own and hands the memory and pids controllers to its children.
func (c *cgroups) claim() error {
	leaf := filepath.Join(c.dir, "toolwire-server")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	procs, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(string(procs)) {
		if err := writeCgroup(filepath.Join(leaf, "cgroup.procs"), pid); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("moving process %s into %s: %w", pid, leaf, err)
		}
	}
	if err := writeCgroup(filepath.Join(c.dir, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		return err
	}
	c.sweep()
	return nil
}

// sweep removes the call cgroups a server before this one left in the
// delegated cgroup (killed mid-call, it removed none), killing what they
// still hold, and numbers this server's calls past any it cannot remove,
// so that no call finds its cgroup's name taken.
func (c *cgroups) sweep() {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "toolwire-call-")
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(c.dir, e.Name())
		c.remove(dir)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if v, err := strconv.ParseUint(n, 10, 64); err == nil && v > c.n.Load() {
			c.n.Store(v)
		}
	}
}

// call makes the cgroup of one call, with its limits, and returns its
// folder. A nil c makes none.
func (c *cgroups) call() (string, error) {
	if c == nil {
		return "", nil
	}
	dir := filepath.Join(c.dir, "toolwire-call-"+strconv.FormatUint(c.n.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	limit := func(v uint64) string {
		if v == 0 {
			return "max"
		}
		return strconv.FormatUint(v, 10)
	}
	for _, w := range []struct{ file, value string }{
		{"memory.max", limit(c.memory)},
		{"memory.swap.max", "0"}, // memory_bytes means memory, not memory and swap
		{"pids.max", limit(c.processes)},
	} {
		if err := writeCgroup(filepath.Join(dir, w.file), w.value); err != nil && !(w.file == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			c.remove(dir)
			return "", fmt.Errorf("%s: %w", w.file, err)
		}
	}
	return dir, nil
}

// remove removes a call's cgroup, killing what it still holds. A nil c or
// an empty dir is nothing to remove.
func (c *cgroups) remove(dir string) {
	if c == nil || dir == "" {
		return
	}
	for i := range 20 {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if i == 0 {
			_ = writeCgroup(filepath.Join(dir, "cgroup.kill"), "1")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeCgroup writes one value to a cgroup file (made, in a fake folder).
func writeCgroup(file, value string) error {
	return os.WriteFile(file, []byte(value+"\n"), 0o644)
}
