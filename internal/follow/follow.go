// Package follow keeps a value read from files and reads it again when
// they change, so that what an operator rotates in place (a certificate,
// a CA bundle, a tokens file, an updated Kubernetes Secret) takes effect
// without a restart. A file's stamp (Look: its modification time, size
// and identity) is looked at once every 10 s at most, on use; while the
// files cannot be read (missing, half written during a rotation, or not
// a regular file) the last good value stays in use. ReadFile is how such
// a file is read: it never blocks on a named pipe put in its place.
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

	mu     sync.Mutex // one look at a time
	stamps []Stamp    // the files' stamps when the value was read
}

// New follows files, whose value read returns. Nothing is read until Get.
func New[T any](read func() (T, error), files ...string) *Files[T] {
	return &Files[T]{files: files, read: read}
}

// Get returns the value as the files hold it now: read again when one of
// their stamps is not the Same as at the last read, the last good
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
	stamps := make([]Stamp, len(f.files))
	for i, name := range f.files {
		st, err := Look(name)
		if err != nil {
			if v != nil {
				return *v, nil // keep the last good value during a rotation
			}
			var zero T
			return zero, err
		}
		stamps[i] = st
	}
	if v != nil && slices.EqualFunc(stamps, f.stamps, Stamp.Same) {
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
	f.stamps = stamps
	return got, nil
}

// racy is how recent a modification time must be for a stamp to be racy:
// more than a file system's clock tick (a few milliseconds on Linux's,
// 1–2 s on some others).
const racy = 3 * time.Second

// A Stamp is what a look at a file saw: its modification time, size and
// identity. A file rewritten in place changes its time; one renamed over
// it (an editor's save, a Kubernetes Secret's update) is another file,
// whatever its time. But a write within the file system's clock tick of
// the look leaves the time as the look saw it: a file read between a
// truncation and the write that follows would otherwise stay empty for
// good. So a stamp taken within racy of its modification time, or before
// it (a clock behind the file system's), is racy, and the Same as no
// other: the file is read again at the next look, when the time has
// settled.
type Stamp struct {
	info os.FileInfo
	racy bool
}

// Look stamps the named file as it is now, following symbolic links. A
// file followed must be a regular file: anything else in its place (a
// named pipe, whose read would block the look, and every Get behind it,
// for good; a device; a directory) is an error, as a missing file is, so
// the last good value stays in use.
func Look(name string) (Stamp, error) {
	now := time.Now()
	info, err := os.Stat(name)
	if err != nil {
		return Stamp{}, err
	}
	if !info.Mode().IsRegular() {
		return Stamp{}, notRegular(name, info.Mode())
	}
	return Stamp{info: info, racy: info.ModTime().After(now.Add(-racy))}, nil
}

// Same tells whether s and o stamp the same file, unchanged between them.
// Neither may be racy or the zero Stamp.
func (s Stamp) Same(o Stamp) bool {
	if s.info == nil || o.info == nil || s.racy || o.racy {
		return false
	}
	return s.info.ModTime().Equal(o.info.ModTime()) && s.info.Size() == o.info.Size() && os.SameFile(s.info, o.info)
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
