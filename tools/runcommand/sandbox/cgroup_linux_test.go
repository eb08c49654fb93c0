package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroup lays out a cgroup v2 folder under a temporary root as the
// kernel would show it: the process's cgroup with the controllers given.
func fakeCgroup(t *testing.T, controllers string) (root string, mountinfo, self []byte) {
	t.Helper()
	root = t.TempDir()
	dir := filepath.Join(root, "sys/fs/cgroup/kubepods/pod-1/toolwire")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"cgroup.controllers":     controllers + "\n",
		"cgroup.subtree_control": "\n",
		"cgroup.procs":           "1\n57\n",
		"cgroup.type":            "domain\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mountinfo = []byte("25 30 0:23 / /proc rw - proc proc rw\n" +
		"31 30 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n")
	self = []byte("0::/kubepods/pod-1/toolwire\n")
	return root, mountinfo, self
}

// TestDelegatedCgroup checks, against a fake cgroup folder (the machine's
// own cgroups are not the tests' to change), that a delegated cgroup v2 is
// found and claimed (the server's processes moved into a leaf, memory and
// pids handed to children), that each call's cgroup gets its limits, and
// that anything less falls back to the watchdog.
func TestDelegatedCgroup(t *testing.T) {
	t.Parallel()
	root, mountinfo, self := fakeCgroup(t, "cpuset cpu io memory pids")
	cg, err := delegated(mountinfo, self, root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "sys/fs/cgroup/kubepods/pod-1/toolwire")
	if cg.dir != dir {
		t.Errorf("cgroup folder %s; want %s", cg.dir, dir)
	}
	// A server killed mid-call left the cgroups of two calls (a fake
	// folder's cannot be removed as the kernel's can: they hold files).
	for _, left := range []string{"toolwire-call-1", "toolwire-call-7"} {
		if err := os.MkdirAll(filepath.Join(dir, left), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, left, "memory.max"), []byte("max\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := cg.claim(); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := read("cgroup.subtree_control"); got != "+memory +pids" {
		t.Errorf("subtree_control %q; want the memory and pids controllers handed down", got)
	}
	if got := read("toolwire-server/cgroup.procs"); got != "57" { // the fake file keeps the last pid written
		t.Errorf("the server's leaf holds %q; want the processes moved there", got)
	}
	cg.memory, cg.processes = 256<<20, 64
	call, err := cg.call()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(call) != dir || filepath.Base(call) != "toolwire-call-8" {
		t.Errorf("call cgroup %s; want toolwire-call-8 (past those left) in %s", call, dir)
	}
	if got := read("toolwire-call-7/cgroup.kill"); got != "1" {
		t.Errorf("a left cgroup's cgroup.kill = %q; want what it holds killed", got)
	}
	for file, want := range map[string]string{"memory.max": "268435456", "memory.swap.max": "0", "pids.max": "64"} {
		if got := read(filepath.Join(filepath.Base(call), file)); got != want {
			t.Errorf("%s = %q; want %q", file, got, want)
		}
	}
	if second, _ := cg.call(); second == call {
		t.Errorf("two calls share the cgroup %s", call)
	}
	cg.memory = 0
	unlimited, err := cg.call()
	if err != nil {
		t.Fatal(err)
	}
	if got := read(filepath.Join(filepath.Base(unlimited), "memory.max")); got != "max" {
		t.Errorf("memory.max without memory_bytes = %q; want max", got)
	}

	for name, tt := range map[string]struct {
		controllers string
		self        string
		mount       bool
	}{
		"cgroup v1 only":     {"memory pids", "4:memory:/kubepods\n", true},
		"no cgroup2 mounted": {"memory pids", "0::/kubepods/pod-1/toolwire\n", false},
		"no controllers (a v2 mount beside v1, as on this machine)": {"", "0::/kubepods/pod-1/toolwire\n", true},
		"memory but no pids":       {"cpu memory", "0::/kubepods/pod-1/toolwire\n", true},
		"outside the mount's root": {"memory pids", "0::/../elsewhere\n", true},
	} {
		root, mountinfo, _ := fakeCgroup(t, tt.controllers)
		if !tt.mount {
			mountinfo = []byte("25 30 0:23 / /proc rw - proc proc rw\n")
		}
		if cg, err := delegated(mountinfo, []byte(tt.self), root); err == nil {
			t.Errorf("%s: found %+v; want the watchdog", name, cg)
		}
	}
	// Not delegated: the files are not there to write.
	root, mountinfo, self = fakeCgroup(t, "memory pids")
	os.Remove(filepath.Join(root, "sys/fs/cgroup/kubepods/pod-1/toolwire/cgroup.subtree_control"))
	if _, err := delegated(mountinfo, self, root); err == nil || !strings.Contains(err.Error(), "not delegated") {
		t.Errorf("without subtree_control: %v; want not delegated", err)
	}
}

// TestRootCgroupNotDelegated checks that a server in the root cgroup of the
// cgroup v2 hierarchy (as on a machine without systemd, or a VM whose init
// is in it) does not take it for a delegated one: as root it could write
// there, and claiming it would move every process of the machine, init
// among them, into the server's leaf. The fake root is laid out as the
// kernel shows it: no cgroup.type (nor cgroup.kill, cgroup.events).
func TestRootCgroupNotDelegated(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "sys/fs/cgroup")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory pids\n",
		"cgroup.subtree_control": "\n",
		"cgroup.procs":           "1\n2\n57\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mountinfo := []byte("31 30 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw\n")
	cg, err := delegated(mountinfo, []byte("0::/\n"), root)
	if err == nil {
		cg.claim()
		moved, _ := os.ReadFile(filepath.Join(dir, "toolwire-server/cgroup.procs"))
		t.Fatalf("the hierarchy's root was taken as delegated (%s); claiming it moved processes into %s (the last: %q); want the watchdog", cg.dir, filepath.Join(cg.dir, "toolwire-server"), strings.TrimSpace(string(moved)))
	}
	if !strings.Contains(err.Error(), "root of the cgroup v2 hierarchy") {
		t.Errorf("error %q; want it to say the cgroup is the hierarchy's root", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "toolwire-server")); err == nil {
		t.Error("a toolwire-server leaf was made in the hierarchy's root")
	}
}

// TestThisMachinesCgroups checks what findCgroups decides here agrees
// with what the machine has: a cgroup only with a cgroup2 mount whose
// controllers hold memory and pids (this project's test machines have none,
// and must not have their cgroups changed).
func TestThisMachinesCgroups(t *testing.T) {
	mountinfo, err1 := os.ReadFile("/proc/self/mountinfo")
	self, err2 := os.ReadFile("/proc/self/cgroup")
	if err1 != nil || err2 != nil {
		t.Skip("no /proc")
	}
	_, derr := delegated(mountinfo, self, "")
	if derr == nil {
		t.Skip("this machine delegates a cgroup v2 to the tests; findCgroups would claim it")
	}
	if cg, how := findCgroups(Config{}); cg != nil || how != "watchdog" {
		t.Errorf("findCgroups: %v %q; want the watchdog where delegated says %v", cg, how, derr)
	}
}
