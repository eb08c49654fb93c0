package audit

import (
	"fmt"
	"os"
)

// rotatingFile appends to a file and, past maxBytes, renames it to
// name.1 (name.1 to name.2, and so on, keeping backups of them) and starts
// a new one. lumberjack, the usual library for this, was tried and left:
// its Logger starts a goroutine that Close does not stop, one per file
// ever opened, which the project's goroutine-leak checks refuse; what is
// needed here is this much.
type rotatingFile struct {
	name     string
	maxBytes int64
	backups  int
	f        *os.File
	size     int64
}

func openRotating(name string, maxBytes int64, backups int) (*rotatingFile, error) {
	r := &rotatingFile{name: name, maxBytes: maxBytes, backups: backups}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

// Write appends p, rotating first when p would take the file past its
// size (a file never holds less than one write).
func (r *rotatingFile) Write(p []byte) (int, error) {
	if r.f == nil {
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	if r.size > 0 && r.size+int64(len(p)) > r.maxBytes {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotate shifts the backups up by one, the oldest dropped, and starts a
// new file.
func (r *rotatingFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	r.f = nil
	for i := r.backups - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", r.name, i), fmt.Sprintf("%s.%d", r.name, i+1))
	}
	if r.backups > 0 {
		if err := os.Rename(r.name, r.name+".1"); err != nil {
			return err
		}
	} else if err := os.Remove(r.name); err != nil {
		return err
	}
	return r.open()
}

// Sync flushes the file to stable storage.
func (r *rotatingFile) Sync() error {
	if r.f == nil {
		return nil
	}
	return r.f.Sync()
}

func (r *rotatingFile) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}
