// Package usage measures what a workspace holds on disk and what room its
// file system has left: the one walk run_command's sandbox (its
// supervisor's watchdog) and the workspace tools' bound both use, so a
// workspace holds the same number of bytes whichever asks.
//
// It imports only the kernel's interface (x/sys): the supervisor's binary
// links it.
package usage

import "golang.org/x/sys/unix"

// Usage is what a tree holds.
type Usage struct {
	Bytes uint64 // bytes allocated (blocks), a file with several links once
	Files uint64 // files and folders, the roots included
	// Lost says the walk lost its way (a deep folder moved while it was
	// in it): what the tree holds is unknown.
	Lost bool
}

// Free is the room left on the file system holding path: the bytes an
// unprivileged process may still allocate there (statfs's f_bavail,
// which leaves out the blocks the file system reserves for root).
func Free(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
