package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// rotatingFile appends to a file and, past maxBytes, renames it to
// name.1 (name.1 to name.2, and so on, keeping backups of them) and starts
// a new one. lumberjack, the usual library for this, was tried and left:
// its Logger starts a goroutine that Close does not stop, one per file
// ever opened, which the project's goroutine-leak checks refuse; what is
// needed here is this much.
//
// Its writer hands it whole lines only, and each Write is all or nothing,
// so the trail holds whole lines whatever happens:
//   - rotation happens between Writes, so between lines, never inside one;
//   - a Write that fails part way (a full disk) is cut back off the file,
//     and until that cut succeeds nothing more is appended, so a broken
//     line is never glued to the next;
//   - before each Write the file at name is checked to be the one open,
//     and reopened (created) when it was moved or deleted, as logrotate's
//     "create" mode expects; one that cannot be reopened fails the Write.
type rotatingFile struct {
	name     string
	maxBytes int64
	backups  int
	f        *os.File
	torn     int64 // ≥ 0: the size f must be cut back to before it takes another line; -1: it holds whole lines
}

func openRotating(name string, maxBytes int64, backups int) (*rotatingFile, error) {
	r := &rotatingFile{name: name, maxBytes: maxBytes, backups: backups, torn: -1}
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
	r.f = f
	// The file may be new: sync its directory too, or a synced line could
	// be lost with the file's name in a crash. Best effort: not every
	// filesystem can sync a directory.
	if d, err := os.Open(filepath.Dir(r.name)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// current makes sure the open file is the one at name, whole, and returns
// its size.
func (r *rotatingFile) current() (int64, error) {
	if r.f == nil {
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	if r.torn >= 0 {
		if err := r.f.Truncate(r.torn); err != nil {
			return 0, fmt.Errorf("a failed write left part of a line, which cannot be cut off: %w", err)
		}
		r.torn = -1
	}
	open, err := r.f.Stat()
	if err != nil {
		return 0, err
	}
	if at, err := os.Stat(r.name); err != nil || !os.SameFile(open, at) {
		// Moved or deleted while open (logrotate, an operator): what is
		// written to this file now reaches no one. Start a new one.
		r.f.Close()
		r.f = nil
		if err := r.open(); err != nil {
			return 0, fmt.Errorf("the trail's file was moved or deleted and cannot be made again: %w", err)
		}
		if open, err = r.f.Stat(); err != nil {
			return 0, err
		}
	}
	return open.Size(), nil
}

// Write appends p, whole lines, rotating first when p would take the file
// past its size (a file never holds less than one write). It writes all
// of p or nothing.
func (r *rotatingFile) Write(p []byte) (int, error) {
	size, err := r.current()
	if err != nil {
		return 0, err
	}
	if size > 0 && size+int64(len(p)) > r.maxBytes {
		if err := r.rotate(); err != nil {
			return 0, err
		}
		size = 0
	}
	n, err := r.f.Write(p)
	if err == nil {
		return n, nil
	}
	if n > 0 {
		// Part of p reached the file: cut it off now, or before the next
		// Write (current), never leaving a broken line to be glued to the
		// next one.
		if terr := r.f.Truncate(size); terr != nil {
			r.torn = size
			err = errors.Join(err, fmt.Errorf("cutting off the part written: %w", terr))
		}
	}
	return 0, err
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
		return errors.New("no file is open")
	}
	return r.f.Sync()
}

func (r *rotatingFile) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}
