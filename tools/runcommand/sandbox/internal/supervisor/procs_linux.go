package supervisor

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// procLimit holds one call's processes and threads to max_processes at the
// moment each is made: the filter sends clone, fork and vfork to the
// supervisor, which lets one continue only while the tree stays within
// the limit. So a call reaches its own limit before the uid's
// RLIMIT_NPROC, which every call of the uid (and, under the server's uid,
// the server's own threads) shares, and root, whom RLIMIT_NPROC does not
// bind, is held too.
//
// It counts cheaply: the tree as last counted plus what it has let
// continue since; only near the limit does it count the tree again. A
// clone it let continue counts until its thread is seen out of that
// system call (/proc/TID/syscall), since the kernel makes the new task
// only once the thread runs again, which on a loaded machine may be a
// while: so the count never misses a task on its way.
type procLimit struct {
	max   uint64
	count func() uint64 // the tree's tasks now

	mu      sync.Mutex
	counted uint64    // the tree's tasks at the last count
	pending []pending // clones let through and maybe not made yet
	counts  uint64    // counts taken (by allow): a watchdog's begun before the last is stale
	marks   uint64    // clones seen made so far
}

// pending is a clone let through: its thread and system call, and when
// it was seen made (0: not yet), in marks.
type pending struct {
	tid, nr int
	at      time.Time
	made    uint64
}

// stale is how long a clone let through may stay pending at most (its
// thread out of the supervisor's sight: not dumpable).
const stale = 5 * time.Second

func newProcLimit(max uint64, count func() uint64) *procLimit {
	return &procLimit{max: max, count: count, counted: 1}
}

// allow reports whether the tree may make one more task, for the thread
// tid making system call nr, and counts it.
func (p *procLimit) allow(tid, nr int) bool {
	if p == nil || p.max == 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A thread makes one system call at a time: its clone before this one
	// is made (the count that drops it will hold its task).
	for i := range p.pending {
		if p.pending[i].tid == tid && p.pending[i].made == 0 {
			p.marks++
			p.pending[i].made = p.marks
		}
	}
	if p.counted+uint64(len(p.pending))+1 > p.max {
		p.prune()
		p.drop(p.marks)
		p.counted = p.count()
		p.counts++
		if p.counted+uint64(len(p.pending))+1 > p.max {
			return false
		}
	}
	p.pending = append(p.pending, pending{tid: tid, nr: nr, at: time.Now()})
	return true
}

// prune marks made the clones whose thread has left the system call (or
// is gone): their task, if any, is in every count begun from now on.
func (p *procLimit) prune() {
	now := time.Now()
	for i, c := range p.pending {
		if c.made == 0 && (now.Sub(c.at) >= stale || !inSyscall(c.tid, c.nr)) {
			p.marks++
			p.pending[i].made = p.marks
		}
	}
}

// drop forgets the clones seen made by mark upto, once a count begun after
// that holds them replaces the last.
func (p *procLimit) drop(upto uint64) {
	kept := p.pending[:0]
	for _, c := range p.pending {
		if c.made == 0 || c.made > upto {
			kept = append(kept, c)
		}
	}
	p.pending = kept
}

// inSyscall reports whether thread tid is (still, or again) in system
// call nr, or cannot be seen. A thread on a CPU at that moment shows
// "running", which may be the clone itself, let continue and making the
// task now (not yet in a count): so it counts as in it too, until the
// thread is seen elsewhere, makes another clone, or the entry is stale.
// (Taking "running" as out of it let a shell's fork go uncounted: the
// hog's sh, python and 39 sleeps, 41 under max_processes 40, which the
// watchdog then ended.)
func inSyscall(tid, nr int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return !os.IsNotExist(err) && !strings.Contains(err.Error(), "no such process")
	}
	return inSyscallText(b, nr)
}

// inSyscallText reads /proc/TID/syscall's text as inSyscall does.
func inSyscallText(b []byte, nr int) bool {
	f := strings.Fields(string(b))
	return len(f) > 0 && (f[0] == strconv.Itoa(nr) || f[0] == "running")
}

// settle marks the clones made by now, before the watchdog counts the
// tree; sampled then takes that count, and forgets them (not those seen
// made later). It returns where that count stands.
func (p *procLimit) settle() sampling {
	if p == nil {
		return sampling{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune()
	return sampling{counts: p.counts, marks: p.marks}
}

// sampling is where the watchdog's count began: the counts taken and the
// clones seen made by then.
type sampling struct{ counts, marks uint64 }

// sampled takes the watchdog's count of the tree, begun after settle
// returned at, unless allow has counted since (a fresher count, with
// clones made after the watchdog's began). Clones let through or seen
// made since settle stay pending: counted twice at worst.
func (p *procLimit) sampled(n uint64, at sampling) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if at.counts != p.counts {
		return
	}
	p.counted = n
	p.drop(at.marks)
}

// treeTasks counts the tasks (processes and threads, as RLIMIT_NPROC and
// pids.max do) of the supervisor's descendants.
func treeTasks() uint64 {
	var n uint64
	for _, pid := range descendants(os.Getpid()) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		f := statFields(b)
		if len(f) < 18 {
			continue
		}
		threads, _ := strconv.ParseUint(f[17], 10, 64)
		n += max(threads, 1)
	}
	return n
}
