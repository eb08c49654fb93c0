package supervisor

import (
	"os"
	"strconv"
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
// task it let continue may not show in /proc yet, so a recount adds those
// let through in the last flight window. A burst of concurrent forks
// slower than that can still pass the limit by the forks in flight; the
// watchdog ends such a tree at its next sample.
type procLimit struct {
	max   uint64
	count func() uint64 // the tree's tasks now

	mu      sync.Mutex
	counted uint64      // the tree's tasks at the last count
	since   uint64      // tasks let through since
	recent  []time.Time // when the latest were let through
}

// flight is how long a task let through may take to show in /proc.
const flight = 50 * time.Millisecond

func newProcLimit(max uint64, count func() uint64) *procLimit {
	return &procLimit{max: max, count: count, counted: 1}
}

// allow reports whether the tree may make one more task, and counts it.
func (p *procLimit) allow() bool {
	if p == nil || p.max == 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.counted+p.since+1 > p.max {
		p.recount(p.count(), now)
		if p.counted+p.since+1 > p.max {
			return false
		}
	}
	p.since++
	p.recent = append(p.recent, now)
	return true
}

// recount takes n, the tree's tasks counted at now; the tasks let through
// in the last flight window may be missing from it.
func (p *procLimit) recount(n uint64, now time.Time) {
	i := 0
	for i < len(p.recent) && now.Sub(p.recent[i]) > flight {
		i++
	}
	p.recent = append(p.recent[:0], p.recent[i:]...)
	p.counted, p.since = n, uint64(len(p.recent))
}

// sampled gives the limit the watchdog's count of the tree.
func (p *procLimit) sampled(n uint64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.recount(n, time.Now())
	p.mu.Unlock()
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
