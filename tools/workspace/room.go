package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"time"

	"github.com/toolwire/toolwire/tools/workspace/usage"
)

// Limits bound what a workspace may take of its disk. Zero values are
// none.
type Limits struct {
	// MaxBytes and MaxFiles bound what the workspace's folder holds (bytes
	// allocated; files and folders): a write that would take it past
	// either is refused, one that shrinks it is not. run_command's sandbox
	// holds commands to the same numbers (sandbox.max_workspace_bytes and
	// max_workspace_files).
	MaxBytes, MaxFiles uint64
	// MinFreeBytes is the room the workspace's file system must keep for
	// everything else on it (the store, the logs, other sessions): a write
	// that would leave less is refused, and so is a command's start
	// (workspace_min_free_bytes).
	MinFreeBytes uint64
}

// ErrNoRoom is the error of a write the workspace's limits refuse; the
// message says which and what to do.
var ErrNoRoom = errors.New("no room")

// SetLimits bounds what the workspace may take of its disk. Call it before
// the workspace is shared.
func (w *Workspace) SetLimits(l Limits) { w.limits = l }

// Limits are the workspace's bounds.
func (w *Workspace) Limits() Limits { return w.limits }

// Changed says that something other than the workspace tools' writes (a
// command) may have changed what the folder holds: the next write
// measures it again.
func (w *Workspace) Changed() {
	w.held.mu.Lock()
	w.held.known = false
	w.held.mu.Unlock()
}

// held is what a workspace's folder holds, as last measured and updated by
// each write since, so that a write does not walk the folder: it is
// measured again after a command (Changed), and once it is older than
// remeasure or 20 times its walk, for whatever changed it outside the
// server's view.
type held struct {
	mu           sync.Mutex
	known        bool
	bytes, files uint64
	at           time.Time     // when it was measured
	took         time.Duration // how long that walk took
}

// remeasure is how old a measure may grow, at least, before a write takes
// a new one.
const remeasure = time.Minute

// blockSize is what a write is charged per started block until its file's
// real allocation is known.
const blockSize = 4096

// CheckFree refuses, with an ErrNoRoom error the model can read, when the
// workspace's file system has less room left than Limits.MinFreeBytes
// plus need; the check is one statfs.
func (w *Workspace) CheckFree(need uint64) error {
	if w.limits.MinFreeBytes == 0 {
		return nil
	}
	free, err := usage.Free(w.real)
	if err != nil || free >= w.limits.MinFreeBytes+need {
		return nil // a file system that cannot say leaves the decision to the write
	}
	return fmt.Errorf("%w: the disk holding the workspace has %s left, and the server keeps %s of it free for everything else (workspace_min_free_bytes); remove files you no longer need, or tell the user the server is short of disk",
		ErrNoRoom, bytesText(free), bytesText(w.limits.MinFreeBytes))
}

// charge is a write's claim on the workspace's room: settle it with the
// file's real allocation once written, or undo it.
type charge struct {
	w     *Workspace
	est   int64 // the write's estimated allocation
	bytes int64 // what was added to held.bytes: est less the old file's
	files uint64
}

// take checks that a write of n bytes over what held old bytes, making
// files new files and folders, has room, and charges it to the folder's
// measure.
func (w *Workspace) take(n, old, files uint64) (*charge, error) {
	l := w.limits
	est := (n + blockSize - 1) / blockSize * blockSize
	grows := files > 0 || est > old
	if grows {
		if err := w.CheckFree(est); err != nil {
			return nil, err
		}
	}
	if l.MaxBytes == 0 && l.MaxFiles == 0 {
		return nil, nil
	}
	h := &w.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.known || time.Since(h.at) > max(remeasure, 20*h.took) {
		start := time.Now()
		// Stopping past MaxFiles bounds the walk; bytes are counted in
		// full so that the message can say what the folder holds.
		u := usage.Measure([]string{w.real}, 0, l.MaxFiles)
		h.bytes, h.files, h.known = u.Bytes, u.Files, !u.Lost
		h.at, h.took = time.Now(), time.Since(start)
	}
	c := &charge{w: w, est: int64(est), bytes: int64(est) - int64(old), files: files}
	if grows {
		switch after := int64(h.bytes) + c.bytes; {
		case l.MaxBytes > 0 && after > int64(l.MaxBytes):
			return nil, fmt.Errorf("%w: the workspace holds %s, and this write would take it to %s, past its limit, sandbox.max_workspace_bytes: %s; remove or shrink files you no longer need first",
				ErrNoRoom, bytesText(h.bytes), bytesText(uint64(after)), bytesText(l.MaxBytes))
		case l.MaxFiles > 0 && files > 0 && h.files+files > l.MaxFiles:
			return nil, fmt.Errorf("%w: the workspace holds %d files and folders, its limit (sandbox.max_workspace_files); remove some you no longer need first",
				ErrNoRoom, h.files)
		}
	}
	h.add(c.bytes, c.files)
	return c, nil
}

// add changes the measure by bytes and files. Called with h.mu held.
func (h *held) add(bytes int64, files uint64) {
	h.bytes = uint64(max(int64(h.bytes)+bytes, 0))
	h.files += files
}

// settle replaces the charge's estimate with the file's real allocation,
// from info.
func (c *charge) settle(info fs.FileInfo) {
	if c == nil {
		return
	}
	h := &c.w.held
	h.mu.Lock()
	defer h.mu.Unlock()
	h.add(int64(allocated(info))-c.est, 0)
}

// undo takes back a charge whose write failed.
func (c *charge) undo() {
	if c == nil {
		return
	}
	h := &c.w.held
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bytes = uint64(max(int64(h.bytes)-c.bytes, 0))
	h.files -= min(c.files, h.files)
}

// bounded reports whether the folder's size is bounded.
func (w *Workspace) bounded() bool { return w.limits.MaxBytes > 0 || w.limits.MaxFiles > 0 }

// allocated is the bytes the file info describes holds on disk.
func allocated(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Blocks) * 512
	}
	return uint64(info.Size())
}

// bytesText says n bytes as a person reads them: "1.5 GiB (1610612736
// bytes)".
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", float64(n)/float64(div), "KMGTPE"[exp], n)
}
