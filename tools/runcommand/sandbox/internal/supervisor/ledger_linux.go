package supervisor

import (
	"sync"

	"golang.org/x/sys/unix"
)

// ledger holds the files without a name the command made or left while it
// runs: its memfds and O_TMPFILE files from their making, and the regular
// files that lost their last name (unlink, rename) while something held
// them open. No folder shows them, and /proc/PID/fd shows them only in
// the fd tables of dumpable processes, never behind a memory mapping or in
// flight in a Unix socket; yet they fill the disk (memory, for memfds) as
// any file does. The supervisor keeps an O_PATH descriptor of each, so it
// can measure each whoever holds it, and lets go of one once nothing but
// that descriptor holds it (release).
type ledger struct {
	mu    sync.Mutex
	max   int // files it holds at most; past it, the calls that would add one fail with EMFILE
	files map[[2]uint64]held
}

type held struct {
	fd    int // O_PATH
	memfd bool
}

func newLedger(max int) *ledger {
	return &ledger{max: max, files: map[[2]uint64]held{}}
}

// full reports whether the ledger holds its most.
func (l *ledger) full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.files) >= l.max
}

// add keeps a path descriptor of the file fd is open on (not fd itself,
// whose open file the target shares: the lease check in release must see
// the target's open file as another).
func (l *ledger) add(fd int, memfd bool) {
	p, err := unix.Open(procFD(fd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	l.keep(p, memfd)
}

// keep keeps the O_PATH descriptor p.
func (l *ledger) keep(p int, memfd bool) {
	var st unix.Stat_t
	if unix.Fstat(p, &st) != nil {
		unix.Close(p)
		return
	}
	k := [2]uint64{st.Dev, st.Ino}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.files[k]; ok {
		unix.Close(p)
		return
	}
	l.files[k] = held{fd: p, memfd: memfd}
}

// measure returns the bytes the ledger's files take (memfds' apart too)
// and their identities; with release, it first lets go of the files
// nothing else holds, and of those that got a name again (linkat), which
// the walk of the roots now counts.
func (l *ledger) measure(releasing bool) (bytes, memfd uint64, keys map[[2]uint64]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys = make(map[[2]uint64]bool, len(l.files))
	for k, h := range l.files {
		var st unix.Stat_t
		if unix.Fstat(h.fd, &st) != nil || (releasing && (st.Nlink > 0 || release(h.fd))) {
			unix.Close(h.fd)
			delete(l.files, k)
			continue
		}
		keys[k] = true
		n := uint64(st.Blocks) * 512
		bytes += n
		if h.memfd {
			memfd += n
		}
	}
	return bytes, memfd, keys
}

// close lets go of every file: the command's processes are gone.
func (l *ledger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, h := range l.files {
		unix.Close(h.fd)
		delete(l.files, k)
	}
}

// release reports whether nothing but the O_PATH descriptor p holds the
// file it names: no open file anywhere (a descriptor in any process, in
// flight in a Unix socket, or behind a memory mapping). It asks the kernel
// with a write lease, which it grants only to an open file that is the
// file's only one. Such a file it then truncates, so that nothing keeps
// its blocks: a path descriptor elsewhere (which no lease sees) could
// open it again, but finds it empty. It reports false when it cannot tell
// (leases disabled, a file it does not own, a file system without them).
func release(p int) bool {
	var st unix.Stat_t
	if unix.Fstat(p, &st) != nil {
		return false
	}
	// Read or write access to open it: the owner may give itself either.
	f, err := unix.Open(procFD(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == unix.EACCES {
		f, err = unix.Open(procFD(p), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if err == unix.EACCES && unix.Chmod(procFD(p), st.Mode&0o7777|0o600) == nil {
		f, err = unix.Open(procFD(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return false
	}
	_, err = unix.FcntlInt(uintptr(f), unix.F_SETLEASE, unix.F_WRLCK)
	if err == nil {
		_, _ = unix.FcntlInt(uintptr(f), unix.F_SETLEASE, unix.F_UNLCK)
	}
	unix.Close(f)
	if err != nil {
		return false
	}
	if st.Size > 0 {
		if st.Mode&0o200 == 0 {
			_ = unix.Chmod(procFD(p), st.Mode&0o7777|0o200)
		}
		if w, err := unix.Open(procFD(p), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.Ftruncate(w, 0)
			unix.Close(w)
		}
	}
	return true
}
