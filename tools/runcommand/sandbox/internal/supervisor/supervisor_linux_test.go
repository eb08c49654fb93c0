package supervisor

import (
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestExitOf(t *testing.T) {
	l := Limits{CPUSeconds: 2}
	signaled := func(sig syscall.Signal) unix.WaitStatus { return unix.WaitStatus(sig) }
	if e := exitOf(reaped{status: signaled(syscall.SIGXCPU)}, l); e.Limit != "cpu_seconds" || e.Code != -1 {
		t.Errorf("SIGXCPU: %+v", e)
	}
	if e := exitOf(reaped{status: signaled(syscall.SIGXFSZ)}, l); e.Limit != "max_file_bytes" {
		t.Errorf("SIGXFSZ: %+v", e)
	}
	spent := reaped{status: signaled(syscall.SIGKILL)}
	spent.usage.Utime.Sec = 3
	if e := exitOf(spent, l); e.Limit != "cpu_seconds" {
		t.Errorf("SIGKILL past the CPU limit: %+v", e)
	}
	if e := exitOf(reaped{status: signaled(syscall.SIGKILL)}, l); e.Limit != "" || e.Signal != int(syscall.SIGKILL) {
		t.Errorf("SIGKILL: %+v", e)
	}
	if e := exitOf(reaped{status: unix.WaitStatus(3 << 8)}, l); e.Code != 3 || e.Signal != 0 {
		t.Errorf("exit 3: %+v", e)
	}
}

// TestProcLimit checks the count of a call's processes: clones let through
// until the tree would pass the limit, then a count of the tree; a clone
// whose thread is still in the system call counts until it leaves it; a
// watchdog's count begun before a fresher one is ignored.
func TestProcLimit(t *testing.T) {
	tree := uint64(1)
	p := newProcLimit(3, func() uint64 { return tree })
	gone := 1 << 30 // no such thread: its clone is made
	if !p.allow(gone, unix.SYS_CLONE) || !p.allow(gone, unix.SYS_CLONE) {
		t.Fatal("clones within the limit refused")
	}
	tree = 3
	if p.allow(gone, unix.SYS_CLONE) {
		t.Error("a clone past the limit (tree of 3, limit 3) let through")
	}
	tree = 2
	if !p.allow(gone, unix.SYS_CLONE) {
		t.Error("a clone within the limit (tree of 2) refused after a count")
	}

	// A thread blocked in read stands for one whose clone the kernel has
	// not made yet: it counts, though no count of the tree shows it.
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	tids := make(chan int)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tids <- unix.Gettid()
		unix.Read(fds[0], make([]byte, 1))
		close(done)
	}()
	blocked := <-tids
	for !inSyscall(blocked, unix.SYS_READ) {
		time.Sleep(time.Millisecond)
	}
	tree = 1
	// A thread that asks again has made its last clone, though it is in
	// the same system call again (a shell's loop of forks): its clones
	// do not pile up.
	p = newProcLimit(3, func() uint64 { return tree })
	for range 10 {
		if !p.allow(blocked, unix.SYS_READ) {
			t.Fatal("a loop of clones, one at a time, refused within the limit")
		}
	}
	p = newProcLimit(2, func() uint64 { return tree })
	if !p.allow(blocked, unix.SYS_READ) {
		t.Fatal("refused within the limit")
	}
	if p.allow(gone, unix.SYS_CLONE) {
		t.Error("a clone let through while another is pending at the limit")
	}
	unix.Write(fds[1], []byte{1})
	<-done
	for inSyscall(blocked, unix.SYS_READ) {
		time.Sleep(time.Millisecond)
	}
	if !p.allow(gone, unix.SYS_CLONE) {
		t.Error("refused once the pending clone's thread left the call (and the tree holds 1)")
	}

	// A thread on a CPU when looked at may be making the clone right now:
	// it counts as in the call (the kernel shows no number then).
	for text, in := range map[string]bool{
		"running\n": true,
		"56 0x1200011 0x0 0x0 0x0 0x7f0 0x0 0x7ffc 0x7f1\n":   true,
		"61 0xffffffff 0x7ffc 0x0 0x0 0x0 0x0 0x7ffc 0x7f1\n": false, // waiting for the child
		"-1 0x7ffc 0x55d\n": false, // preempted in user space
	} {
		if got := inSyscallText([]byte(text), 56); got != in {
			t.Errorf("in clone (56) by %q: %v, want %v", text, got, in)
		}
	}

	// A clone seen made after the watchdog began its count may be missing
	// from it: it stays counted.
	p = newProcLimit(10, func() uint64 { return 1 })
	p.allow(gone, unix.SYS_CLONE)
	at := p.settle()
	p.allow(blocked, unix.SYS_READ)
	p.allow(blocked, unix.SYS_READ) // the first made now, after settle
	p.sampled(1, at)
	if p.counted != 1 || len(p.pending) != 2 {
		t.Errorf("after the watchdog's count: %d counted, %d pending; want 1 and the 2 since it began", p.counted, len(p.pending))
	}

	at = p.settle()
	p.counts++ // allow counted the tree afresh meanwhile
	p.counted = 2
	p.sampled(1, at)
	if p.counted != 2 {
		t.Error("a watchdog's count begun before a fresher one replaced it")
	}
}

// TestWatchMinFree checks the watchdog's look at the room left on the
// roots' file systems, with statfs faked: a command that leaves a root's
// file system less than the reserve is ended as past
// workspace_min_free_bytes, naming the root; one that leaves it the
// reserve, or runs without one, is not.
func TestWatchMinFree(t *testing.T) {
	roots := []string{t.TempDir(), t.TempDir()}
	left := map[string]uint64{roots[0]: 10 << 30, roots[1]: 10 << 30}
	w := newWatch(Setup{}, Spec{Roots: roots, MinFreeBytes: 1 << 30}, newLedger(0), nil, &lockGuard{})
	w.free = func(path string) (uint64, error) { return left[path], nil }
	if got := w.check(); got != "" {
		t.Fatalf("10 GiB left on both, a 1 GiB reserve: check() = %q; want nothing", got)
	}
	left[roots[1]] = 1<<30 - 1
	if got := w.check(); got != "workspace_min_free_bytes" || !strings.Contains(w.detail, roots[1]) {
		t.Errorf("$TMPDIR's file system a byte short of the reserve: check() = %q (%s); want workspace_min_free_bytes naming %s", got, w.detail, roots[1])
	}
	left[roots[1]] = 1 << 30
	if got := w.check(); got != "" {
		t.Errorf("exactly the reserve left: check() = %q; want nothing", got)
	}
	none := newWatch(Setup{}, Spec{Roots: roots}, newLedger(0), nil, &lockGuard{})
	none.free = func(string) (uint64, error) { return 0, nil }
	if got := none.check(); got != "" {
		t.Errorf("no reserve, a full disk: check() = %q; want nothing", got)
	}
}
