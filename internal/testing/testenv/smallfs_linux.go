package testenv

import (
	"fmt"
	"syscall"
	"testing"
)

// SmallFS mounts a tmpfs of size bytes on a new directory, unmounted when
// the test ends, and returns the directory: a real filesystem that fills
// (ENOSPC). It reports Missing where mounting is not permitted (not root,
// or a container without CAP_SYS_ADMIN).
func SmallFS(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		Missing(t, fmt.Sprintf("permission to mount a %d-byte tmpfs (%v: the full-disk tests need root with mount permission)", size, err))
	}
	// Registered after TempDir's removal, so it runs before it.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the test's tmpfs %s: %v", dir, err)
		}
	})
	return dir
}
