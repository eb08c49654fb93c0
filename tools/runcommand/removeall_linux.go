package runcommand

import (
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// removeAll removes the call's TMPDIR once nothing of the command runs,
// whatever the command left in it: os.RemoveAll, which works by
// descriptor, and then, for what it could not remove, a removal that gives
// each folder its owner's rights back first (a folder made 0300 or 0000
// cannot be listed or emptied) and climbs back with "..", so that no path
// length and no descriptor limit stops it (folders nested past PATH_MAX).
// The server is the folder's owner or may act as one.
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	parent, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(parent)
	removeIn(parent, filepath.Base(dir))
}

// removeIn removes name, a folder in the folder parent, with all it holds.
func removeIn(parent int, name string) {
	var pst unix.Stat_t
	if unix.Fstat(parent, &pst) != nil {
		return
	}
	// The folders the removal is in, below parent: each one's name in the
	// one above and its identity, checked when climbing back to it.
	type level struct {
		name string
		id   [2]uint64
	}
	cur, id, err := openToEmpty(parent, name)
	if err != nil {
		return
	}
	path := []level{{"", [2]uint64{pst.Dev, pst.Ino}}, {name, id}}
	buf := make([]byte, 32<<10)
	for len(path) > 1 {
		child, childID, childName := -1, [2]uint64{}, ""
		for child < 0 {
			n, err := unix.ReadDirent(cur, buf)
			if err != nil || n <= 0 {
				break
			}
			_, _, names := unix.ParseDirent(buf[:n], -1, nil)
			for _, e := range names {
				err := unix.Unlinkat(cur, e, 0)
				if err == unix.EISDIR || err == unix.EPERM {
					if unix.Unlinkat(cur, e, unix.AT_REMOVEDIR) == nil {
						continue
					}
					if fd, cid, err := openToEmpty(cur, e); err == nil {
						child, childID, childName = fd, cid, e
						break
					}
				}
			}
		}
		if child >= 0 {
			unix.Close(cur)
			cur = child
			path = append(path, level{childName, childID})
			continue
		}
		// cur is as empty as it gets: climb, and remove it.
		up, err := unix.Openat(cur, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		var ust unix.Stat_t
		if err != nil || unix.Fstat(up, &ust) != nil || [2]uint64{ust.Dev, ust.Ino} != path[len(path)-2].id {
			if err == nil {
				unix.Close(up)
			}
			return
		}
		_ = unix.Unlinkat(up, path[len(path)-1].name, unix.AT_REMOVEDIR)
		path = path[:len(path)-1]
		cur = up
	}
	if cur != parent {
		unix.Close(cur)
	}
}

// openToEmpty opens the folder name in dir (not following a symlink) to
// empty it, giving it first the owner's read, write and search rights.
func openToEmpty(dir int, name string) (int, [2]uint64, error) {
	p, err := unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, [2]uint64{}, err
	}
	defer unix.Close(p)
	var st unix.Stat_t
	if err := unix.Fstat(p, &st); err != nil {
		return -1, [2]uint64{}, err
	}
	if st.Mode&0o700 != 0o700 {
		_ = unix.Chmod("/proc/self/fd/"+strconv.Itoa(p), st.Mode&0o7777|0o700)
	}
	fd, err := unix.Openat(p, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	return fd, [2]uint64{st.Dev, st.Ino}, err
}
