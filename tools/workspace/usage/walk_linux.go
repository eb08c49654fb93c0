package usage

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// KeepFDs is how many folders deep the walk keeps a descriptor of each
// folder it is in; deeper, it climbs back with "..", checking it comes
// back to the folder it left.
const KeepFDs = 128

// Measure measures the roots: bytes allocated (a file with several links
// once) and entries, stopping once past either limit. It walks by
// descriptor (openat from each folder, never a path), so nothing nested
// deeper than PATH_MAX hides from it; a folder its owner made unreadable
// or unsearchable, which would hide what it holds, gets its owner's read
// and search rights back first (the walker is its owner: the supervisor
// under the command's uid, or the server that owns the session folders).
// Lost says a folder nested deeper than KeepFDs moved while the walk was
// in it, so that the walk could not find its way back: what the tree
// holds is then unknown, which callers treat as past the limit. A limit
// of 0 is none.
func Measure(roots []string, maxBytes, maxFiles uint64) Usage {
	u := &measure{maxBytes: maxBytes, maxFiles: maxFiles, seen: map[[2]uint64]bool{}}
	for _, root := range roots {
		if u.walk(root) {
			break
		}
	}
	return Usage{Bytes: u.size, Files: u.files, Lost: u.lost}
}

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

type measure struct {
	maxBytes, maxFiles uint64
	size, files        uint64
	seen               map[[2]uint64]bool // files with several links, counted once
	lost               bool
	names              []byte // getdents' buffer
}

func (u *measure) over() bool {
	return u.lost || (u.maxBytes > 0 && u.size > u.maxBytes) || (u.maxFiles > 0 && u.files > u.maxFiles)
}

// frame is a folder the walk is in.
type frame struct {
	fd    int // -1 while the walk is deeper than KeepFDs below it
	id    [2]uint64
	names []string // its entries still to measure
}

// count adds one entry to the measure.
func (u *measure) count(st *unix.Stat_t) {
	u.files++
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		k := [2]uint64{st.Dev, st.Ino}
		if u.seen[k] {
			return
		}
		u.seen[k] = true
	}
	u.size += uint64(st.Blocks) * 512
}

// walk measures the tree at root and reports whether a limit was passed.
func (u *measure) walk(root string) bool {
	fd, st, err := openDir(unix.AT_FDCWD, root)
	if err != nil {
		return u.over()
	}
	u.count(&st)
	stack := []frame{{fd: fd, id: [2]uint64{st.Dev, st.Ino}}}
	defer func() {
		for _, f := range stack {
			if f.fd >= 0 {
				unix.Close(f.fd)
			}
		}
	}()
	stack[0].names = u.list(fd)
	for len(stack) > 0 && !u.over() {
		top := &stack[len(stack)-1]
		if len(top.names) == 0 {
			// Done with top: back to its parent.
			if len(stack) > 1 && stack[len(stack)-2].fd < 0 {
				up, ust, err := openDir(top.fd, "..")
				if err != nil || [2]uint64{ust.Dev, ust.Ino} != stack[len(stack)-2].id {
					if err == nil {
						unix.Close(up)
					}
					u.lost = true
					return true
				}
				stack[len(stack)-2].fd = up
			}
			unix.Close(top.fd)
			stack = stack[:len(stack)-1]
			continue
		}
		name := top.names[len(top.names)-1]
		top.names = top.names[:len(top.names)-1]
		var est unix.Stat_t
		if unix.Fstatat(top.fd, name, &est, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone meanwhile
		}
		u.count(&est)
		if est.Mode&unix.S_IFMT != unix.S_IFDIR || u.over() {
			continue
		}
		child, cst, err := openDir(top.fd, name)
		if err != nil {
			continue
		}
		if len(stack) >= KeepFDs {
			unix.Close(top.fd)
			top.fd = -1
		}
		stack = append(stack, frame{fd: child, id: [2]uint64{cst.Dev, cst.Ino}, names: u.list(child)})
	}
	return u.over()
}

// openDir opens the folder name in dir (not following a symlink) to read
// it, giving it first, as its owner, the read and search rights it lacks.
func openDir(dir int, name string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dir, name, flags, 0)
	if err == unix.EACCES {
		// An O_PATH descriptor needs no rights on the folder itself, and
		// pins it: what is made readable is what is then opened.
		p, perr := unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if perr != nil {
			return -1, st, err
		}
		if unix.Fstat(p, &st) == nil && unix.Chmod(procFD(p), st.Mode&0o7777|0o500) == nil {
			fd, err = unix.Openat(p, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		unix.Close(p)
	}
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	if st.Mode&0o500 != 0o500 {
		// Readable but not searchable (or the reverse): its entries' sizes
		// need both.
		_ = unix.Fchmod(fd, st.Mode&0o7777|0o500)
	}
	return fd, st, nil
}

// list reads the names in the folder fd, or as many as could still be
// counted within max_workspace_files and one more.
func (u *measure) list(fd int) []string {
	if u.names == nil {
		u.names = make([]byte, 32<<10)
	}
	var names []string
	for {
		n, err := unix.ReadDirent(fd, u.names)
		if err != nil || n <= 0 {
			return names
		}
		_, _, names = unix.ParseDirent(u.names[:n], -1, names)
		if u.maxFiles > 0 && u.files+uint64(len(names)) > u.maxFiles {
			return names
		}
	}
}
