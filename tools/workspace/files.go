package workspace

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
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

// WriteFile writes data to the file at rel (from Rel) atomically: into a
// temporary file beside it, then renamed over it, both inside the root, so
// a reader sees the old content or the new, never half of it. Missing parent
// folders are created. A file being replaced keeps its permissions. A
// symlink is written through (in place, so not atomically), keeping the
// link; os.Root refuses a link that leads outside.
func (w *Workspace) WriteFile(rel string, data []byte) (created bool, err error) {
	perm := fs.FileMode(0o644)
	info, err := w.root.Lstat(rel)
	switch {
	case err == nil && info.Mode()&fs.ModeSymlink != 0:
		target, err := w.root.Stat(rel)
		if err != nil {
			return false, err
		}
		if target.IsDir() {
			return false, &fs.PathError{Op: "write", Path: rel, Err: syscall.EISDIR}
		}
		if err := w.root.WriteFile(rel, data, perm); err != nil {
			return false, err
		}
		return false, w.chown(w.root, rel) // the target, if the write made it
	case err == nil && info.IsDir():
		return false, &fs.PathError{Op: "write", Path: rel, Err: syscall.EISDIR}
	case err == nil:
		perm = info.Mode().Perm()
	case errors.Is(err, fs.ErrNotExist):
		created = true
		if err := w.mkdirAll(filepath.Dir(rel)); err != nil {
			return false, err
		}
	default:
		return false, err
	}

	// The temporary file is made, renamed and, on failure, removed through
	// one handle on the folder, so that a folder swapped for a symlink
	// meanwhile can neither redirect the rename nor strand the file.
	dir, err := w.root.OpenRoot(filepath.Dir(rel))
	if err != nil {
		return false, err
	}
	defer dir.Close()
	base := filepath.Base(rel)
	tmp, err := writeTemp(dir, base, data, perm, w.owner)
	if err != nil {
		return false, err
	}
	rename := (*os.Root).Rename
	if w.rename != nil {
		rename = w.rename
	}
	if err := rename(dir, tmp, base); err != nil {
		if rerr := dir.Remove(tmp); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return false, err
	}
	return created, nil
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
func writeTemp(dir *os.Root, base string, data []byte, perm fs.FileMode, owner *Owner) (string, error) {
	tmp := tempName(base)
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", err
	}
	if owner != nil {
		err = f.Chown(owner.UID, owner.GID)
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
