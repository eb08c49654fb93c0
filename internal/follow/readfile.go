package follow

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ReadFile reads the named file, following symbolic links, when it is a
// regular file, and is what a file read again while serving is read with
// (the config file on reload, a rotated certificate or tokens file). A
// named pipe, device, socket or directory in the file's place is an error
// at once: os.ReadFile would block for good on a pipe that has no writer
// (holding a reload, or a lock every request waits on), and read a device
// such as /dev/zero without end. The file is opened without blocking, so
// swapping a pipe in after a look cannot make the read block either.
func ReadFile(name string) ([]byte, error) { return ReadFileAtMost(name, -1) }

// ReadFileAtMost is ReadFile of a file that may hold at most max bytes (no
// bound when max is negative): a larger one is an error, after reading at
// most max+1 bytes of it, however it grows while read.
func ReadFileAtMost(name string, max int64) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, notRegular(name, info.Mode())
	}
	size := info.Size()
	var r io.Reader = f
	if max >= 0 {
		size = min(size, max)
		r = io.LimitReader(f, max+1)
	}
	b := make([]byte, 0, size+1) // one buffer of the file's size
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) { // the file grew while it was read
			b = append(b, 0)[:len(b)]
		}
	}
	if max >= 0 && int64(len(b)) > max {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
	}
	return b, nil
}

// ErrTooLarge is ReadFileAtMost's error for a file past its bound.
var ErrTooLarge = errors.New("file too large")

// notRegular is the error for name, of mode, not being a regular file.
func notRegular(name string, mode fs.FileMode) error {
	return &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("not a regular file but %s", describeMode(mode))}
}

// describeMode names the kind of file mode is, for errors.
func describeMode(mode fs.FileMode) string {
	switch {
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a device"
	}
	return "a file of mode " + mode.String()
}
