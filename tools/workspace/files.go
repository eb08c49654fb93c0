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

	tmp, err := w.writeTemp(rel, data, perm)
	if err != nil {
		return false, err
	}
	if err := w.root.Rename(tmp, rel); err != nil {
		_ = w.root.Remove(tmp)
		return false, err
	}
	return created, nil
}

// writeTemp writes data to a new hidden file in rel's folder and returns its
// name.
func (w *Workspace) writeTemp(rel string, data []byte, perm fs.FileMode) (string, error) {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".toolwire-"+hex.EncodeToString(suffix[:]))
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
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
		_ = w.root.Remove(tmp)
		return "", err
	}
	return tmp, nil
}
