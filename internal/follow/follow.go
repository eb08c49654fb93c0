// Package follow keeps a value read from files and reads it again when
// they change, so that what an operator rotates in place (a certificate,
// a CA bundle, a tokens file, an updated Kubernetes Secret) takes effect
// without a restart. A file's modification time is looked at once every
// 10 s at most, on use; while the files cannot be read (missing, or half
// written during a rotation) the last good value stays in use.
package follow

import (
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// recheck is how often the files are looked at: 10 s unless SetRecheck
// says.
var recheck atomic.Int64

func init() { recheck.Store(int64(10 * time.Second)) }

// SetRecheck sets how often the files are looked at, for tests that
// rotate them, and returns what restores the interval before.
func SetRecheck(d time.Duration) (restore func()) {
	old := recheck.Swap(int64(d))
	return func() { recheck.Store(old) }
}

// Files is a value read from files.
type Files[T any] struct {
	files []string
	read  func() (T, error)

	cur     atomic.Pointer[T] // the last good value; nil before the first
	checked atomic.Int64      // when the files were last looked at (clock)

	mu       sync.Mutex // one look at a time
	modified []time.Time
}

// New follows files, whose value read returns. Nothing is read until Get.
func New[T any](read func() (T, error), files ...string) *Files[T] {
	return &Files[T]{files: files, read: read}
}

// Get returns the value as the files hold it now: read again when one of
// their modification times changed since the last read, the last good
// value when they cannot be read, and the error only when no read ever
// succeeded. Between looks it costs an atomic load and a clock reading.
func (f *Files[T]) Get() (T, error) {
	now := clock()
	if v := f.cur.Load(); v != nil && now-f.checked.Load() < recheck.Load() {
		return *v, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.cur.Load()
	if v != nil && now-f.checked.Load() < recheck.Load() {
		return *v, nil // another caller just looked
	}
	f.checked.Store(now)
	mod := make([]time.Time, len(f.files))
	for i, name := range f.files {
		st, err := os.Stat(name)
		if err != nil {
			if v != nil {
				return *v, nil // keep the last good value during a rotation
			}
			var zero T
			return zero, err
		}
		mod[i] = st.ModTime()
	}
	if v != nil && slices.EqualFunc(mod, f.modified, time.Time.Equal) {
		return *v, nil
	}
	got, err := f.read()
	if err != nil {
		if v != nil {
			return *v, nil // half written: try again at the next look
		}
		return got, err
	}
	f.cur.Store(&got)
	f.modified = mod
	return got, nil
}

// Recheck makes the next Get look at the files at once.
func (f *Files[T]) Recheck() { f.checked.Store(math.MinInt64 / 2) }

// start anchors clock to the monotonic clock, which a step of the wall
// clock (an NTP correction, a VM resumed) does not move: a wall clock
// set back an hour would otherwise leave the files unlooked at for an
// hour.
var start = time.Now()

// clock is the monotonic time since start, in nanoseconds.
func clock() int64 { return int64(time.Since(start)) }
