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
		return false, w.root.WriteFile(rel, data, perm)
	case err == nil && info.IsDir():
		return false, &fs.PathError{Op: "write", Path: rel, Err: syscall.EISDIR}
	case err == nil:
		perm = info.Mode().Perm()
	case errors.Is(err, fs.ErrNotExist):
		created = true
		if err := w.root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
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
	tmp, err := writeTemp(dir, base, data, perm)
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
func writeTemp(dir *os.Root, base string, data []byte, perm fs.FileMode) (string, error) {
	tmp := tempName(base)
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
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
