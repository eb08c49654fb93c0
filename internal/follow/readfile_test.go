package follow_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/follow"
)

// TestReadFile: a regular file (through a symbolic link too) is read
// whole; a named pipe without a writer, a device without end, a socket's
// place and a directory are errors at once, where os.ReadFile blocks on
// the pipe for good and reads /dev/zero until memory runs out.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("held"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{file, link} {
		if b, err := follow.ReadFile(name); err != nil || string(b) != "held" {
			t.Errorf("ReadFile(%s) = %q, %v; want held", name, b, err)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		fifo:        "not a regular file but a named pipe",
		"/dev/zero": "not a regular file but a character device",
		dir:         "not a regular file but a directory",
	} {
		if b, err := follow.ReadFile(name); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
			t.Errorf("ReadFile(%s) = %d bytes, %v; want an error naming it: %s", name, len(b), err, want)
		}
	}
}

// TestReadFileAtMost: a file within the bound is read whole, one past it
// is ErrTooLarge naming it, and a negative bound is none.
func TestReadFileAtMost(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, max := range []int64{10, 11, -1} {
		if b, err := follow.ReadFileAtMost(file, max); err != nil || string(b) != "0123456789" {
			t.Errorf("ReadFileAtMost(%d) = %q, %v; want the file", max, b, err)
		}
	}
	if b, err := follow.ReadFileAtMost(file, 9); !errors.Is(err, follow.ErrTooLarge) || !strings.Contains(err.Error(), file) {
		t.Errorf("ReadFileAtMost(9) = %q, %v; want ErrTooLarge naming the file", b, err)
	}
}

// TestFilesPipeInPlace: a named pipe put where a followed file was (with no
// writer, as a mistaken mkfifo or a botched rotation leaves it) keeps the
// last good value at once, and so does every Get after it; the next regular
// file is read. The value's own read is os.ReadFile, as a caller's may be:
// Look refuses the pipe before it is read (it blocked every Get behind the
// first for good: with a tokens file, every request of the server).
func TestFilesPipeInPlace(t *testing.T) {
	restore := follow.SetRecheck(0)
	defer restore()
	dir := t.TempDir()
	file := filepath.Join(dir, "value")
	if err := os.WriteFile(file, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := follow.New(func() (string, error) {
		b, err := os.ReadFile(file)
		return string(b), err
	}, file)
	if v, err := f.Get(); err != nil || v != "first" {
		t.Fatalf("Get = %q, %v; want first", v, err)
	}
	// The pipe's other name lets a Get blocked on it go when the test
	// ends, so that the test fails rather than hangs.
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	defer func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	}()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(fifo, file); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range cap(got) {
			v, err := f.Get()
			if err != nil {
				v = err.Error()
			}
			got <- v
		}
	}()
	for range cap(got) {
		select {
		case v := <-got:
			if v != "first" {
				t.Fatalf("Get with a pipe in the file's place = %q; want the last good value, first", v)
			}
		case <-time.After(time.Minute):
			t.Fatal("Get with a pipe in the file's place did not return")
		}
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := f.Get(); err != nil || v != "second" {
		t.Errorf("Get after a regular file is back = %q, %v; want second", v, err)
	}
}
