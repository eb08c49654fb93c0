package follow_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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
