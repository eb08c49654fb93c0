package workspace

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"
)

// sniffLen is how much of a file decides whether it is binary: git's rule,
// a NUL byte in the first 8000 bytes.
const sniffLen = 8000

// IsBinary reports whether a file whose first bytes are head holds binary
// data rather than text.
func IsBinary(head []byte) bool {
	return bytes.IndexByte(head[:min(len(head), sniffLen)], 0) >= 0
}

// ErrNotRegular is the error of a write to a path that names (or a
// symlink that leads to) a special file: a named pipe, a socket or a
// device, which a write could block on or reach past the workspace.
var ErrNotRegular = errors.New("not a regular file")

// WriteFile writes data to the file at rel (from Rel) atomically: into a
// temporary file beside it, then renamed over it, both inside the root, so
// a reader sees the old content or the new, never half of it, and a write
// that fails (a full disk) leaves the old. Missing parent folders are
// created. A file being replaced keeps its permissions (not setuid and
// setgid) and, where the server may give it, its owner. A symlink is
// written through, keeping the link: the file it leads to is replaced the
// same way; os.Root refuses a link that leads outside, and a link to
// anything but a regular file is refused (ErrNotRegular: a named pipe
// would block the write).
func (w *Workspace) WriteFile(rel string, data []byte) (created bool, err error) {
	perm, owner, must := fs.FileMode(0o644), w.owner, true
	info, err := w.root.Lstat(rel)
	if err == nil && info.Mode()&fs.ModeSymlink != 0 {
		return w.writeThrough(rel, data)
	}
	switch {
	case err == nil && info.IsDir():
		return false, &fs.PathError{Op: "write", Path: rel, Err: syscall.EISDIR}
	case err == nil:
		perm = info.Mode().Perm()
		owner, must = w.ownerOf(info)
	case errors.Is(err, fs.ErrNotExist):
		created = true
		if err := w.makeParents(filepath.Dir(rel)); err != nil {
			return false, err
		}
	default:
		return false, err
	}
	return created, w.replace(rel, data, perm, owner, must)
}

// replace writes data to a temporary file in rel's folder and renames it
// over rel. The temporary file is made, renamed and, on failure, removed
// through one handle on the folder, so that a folder swapped for a symlink
// meanwhile can neither redirect the rename nor strand the file.
func (w *Workspace) replace(rel string, data []byte, perm fs.FileMode, owner *Owner, must bool) error {
	dir, err := w.root.OpenRoot(filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer dir.Close()
	base := filepath.Base(rel)
	old, files := uint64(0), uint64(1)
	if info, err := dir.Lstat(base); err == nil {
		old, files = allocated(info), 0
	}
	c, err := w.take(uint64(len(data)), old, files)
	if err != nil {
		return err
	}
	tmp, err := writeTemp(dir, base, data, perm, owner, must)
	if err != nil {
		c.undo()
		return err
	}
	rename := (*os.Root).Rename
	if w.rename != nil {
		rename = w.rename
	}
	if err := rename(dir, tmp, base); err != nil {
		c.undo()
		if rerr := dir.Remove(tmp); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	}
	if info, err := dir.Lstat(base); err == nil {
		c.settle(info)
	}
	return nil
}

// makeParents makes the folder rel and any missing parent, as mkdirAll
// does, once the workspace's limits leave room for them (a folder is
// charged a block).
func (w *Workspace) makeParents(rel string) error {
	if !w.bounded() && w.limits.MinFreeBytes == 0 {
		return w.mkdirAll(rel)
	}
	missing := uint64(0)
	for d := rel; d != "." && d != "/"; d = filepath.Dir(d) {
		if _, err := w.root.Lstat(d); err == nil {
			break
		}
		missing++
	}
	if missing == 0 {
		return w.mkdirAll(rel)
	}
	c, err := w.take(missing*blockSize, 0, missing)
	if err != nil {
		return err
	}
	if err := w.mkdirAll(rel); err != nil {
		c.undo()
		return err
	}
	return nil
}

// maxLinks is how many symlinks writeThrough follows, the kernel's bound.
const maxLinks = 40

// writeThrough writes data to the file the symlink at rel leads to, as
// WriteFile writes a file: it follows the chain of links inside the root
// (each link's target read and joined to its folder), checks that the
// kernel's resolution of rel names the file found (a link through a
// symlinked folder and .. can differ from the joined path: such a link is
// refused rather than guessed at) and replaces that file, keeping the
// links. A link to nothing creates the file it names, in an existing
// folder.
func (w *Workspace) writeThrough(rel string, data []byte) (created bool, err error) {
	at := rel
	for range maxLinks {
		target, err := w.root.Readlink(at)
		if err != nil {
			return false, err
		}
		at = filepath.Join(filepath.Dir(at), target)
		if filepath.IsAbs(target) || !filepath.IsLocal(at) {
			return false, &fs.PathError{Op: "write", Path: rel, Err: errEscapesParent}
		}
		info, err := w.root.Lstat(at)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// A link to nothing: the file is made in its folder, which
			// must exist, and kept only if the kernel finds it through rel.
			parent, err := w.root.Stat(filepath.Dir(at))
			if err != nil {
				return false, err
			}
			if !parent.IsDir() {
				return false, &fs.PathError{Op: "write", Path: rel, Err: syscall.ENOTDIR}
			}
			if err := w.replace(at, data, 0o644, w.owner, true); err != nil {
				return false, err
			}
			if err := w.sameFile(rel, at); err != nil {
				_ = w.root.Remove(at)
				return false, err
			}
			return true, nil
		case err != nil:
			return false, err
		case info.Mode()&fs.ModeSymlink != 0:
			continue
		case info.IsDir():
			return false, &fs.PathError{Op: "write", Path: rel, Err: syscall.EISDIR}
		case !info.Mode().IsRegular():
			return false, &fs.PathError{Op: "write", Path: rel, Err: ErrNotRegular}
		}
		if err := w.sameFile(rel, at); err != nil {
			return false, err
		}
		owner, must := w.ownerOf(info)
		return false, w.replace(at, data, info.Mode().Perm(), owner, must)
	}
	return false, &fs.PathError{Op: "write", Path: rel, Err: syscall.ELOOP}
}

// sameFile checks that rel, symlinks followed by the kernel inside the
// root, names the file at (no symlink).
func (w *Workspace) sameFile(rel, at string) error {
	via, err := w.root.Stat(rel)
	if err != nil {
		return err
	}
	found, err := w.root.Lstat(at)
	if err != nil {
		return err
	}
	if !os.SameFile(via, found) {
		return fmt.Errorf("%w: %s is a symlink through a symlinked folder and .., which write_file does not follow", ErrEscapes, rel)
	}
	return nil
}

// errEscapesParent is os.Root's error for a path that leads out of the root
// (which escapes recognises by its text).
var errEscapesParent = errors.New("path escapes from parent")

// ownerOf is whom a file written over the one info describes belongs to:
// the workspace's owner when it has one (must: the write fails if it cannot
// be given), else that file's own owner, given where the server may (as
// root, or its own already; else the file is the server's).
func (w *Workspace) ownerOf(info fs.FileInfo) (owner *Owner, must bool) {
	if w.owner != nil {
		return w.owner, true
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return &Owner{UID: int(st.Uid), GID: int(st.Gid)}, false
	}
	return nil, false
}

// mkdirAll makes the folder rel and any missing parent, each given to the
// workspace's owner when it has one.
func (w *Workspace) mkdirAll(rel string) error {
	if w.owner == nil {
		return w.root.MkdirAll(rel, 0o755)
	}
	if rel == "." {
		return nil
	}
	if info, err := w.root.Stat(rel); err == nil {
		if !info.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: rel, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if err := w.mkdirAll(filepath.Dir(rel)); err != nil {
		return err
	}
	if err := w.root.Mkdir(rel, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return w.chown(w.root, rel)
}

// chown gives rel in dir to the workspace's owner, when it has one.
func (w *Workspace) chown(dir *os.Root, rel string) error {
	if w.owner == nil {
		return nil
	}
	return dir.Chown(rel, w.owner.UID, w.owner.GID)
}

// nameMax is the longest file name the common file systems (ext4, xfs,
// btrfs, tmpfs, APFS) allow, in bytes.
const nameMax = 255

// tempName returns a new hidden name for a temporary file beside the file
// named base: ".<base>.toolwire-<12 hex>", with base cut short enough that
// the name stays within nameMax, so a file with the longest allowed name can
// still be written.
func tempName(base string) string {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tail := ".toolwire-" + hex.EncodeToString(suffix[:])
	if n := nameMax - len(tail) - 1; len(base) > n {
		for n > 0 && !utf8.RuneStart(base[n]) {
			n--
		}
		base = base[:n]
	}
	return "." + base + tail
}

// writeTemp writes data to a new hidden file in dir, beside base, and
// returns its name; on failure it leaves no file behind.
func writeTemp(dir *os.Root, base string, data []byte, perm fs.FileMode, owner *Owner, must bool) (string, error) {
	tmp := tempName(base)
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", err
	}
	if owner != nil {
		err = f.Chown(owner.UID, owner.GID)
		if !must && errors.Is(err, fs.ErrPermission) {
			err = nil // not the server's to give: the file is the server's
		}
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Chmod(perm) // the umask may have narrowed perm
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = dir.Remove(tmp)
		return "", err
	}
	return tmp, nil
}
