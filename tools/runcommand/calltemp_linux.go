package runcommand

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The calls' TMPDIRs are made in a folder of the server's own,
// toolwire-calls-* in the system's temporary folder, holding a file .lock
// that the server keeps locked (flock) for as long as it runs. A call's
// TMPDIR is removed when its command ends; a server killed mid-call (OOM,
// SIGKILL, a node's reboot with a persistent /tmp, a container restarted in
// its pod with an emptyDir) leaves what its commands wrote there. The next
// server to make its folder removes every sibling whose lock it can take:
// the kernel drops a lock with the last descriptor of its holder, so a
// folder whose lock is free belongs to no running server, whatever its
// process ID was (in a container it is always 1).
var calls struct {
	once sync.Once
	dir  string
	err  error
	lock *os.File // held for the life of the process
}

const callsPrefix = "toolwire-calls-"

// callsDir returns the server's folder for the calls' TMPDIRs, made (and
// the folders of servers that no longer run removed) on first use.
func callsDir() (string, error) {
	calls.once.Do(func() {
		calls.dir, calls.lock, _, calls.err = makeCallsDir(os.TempDir())
	})
	return calls.dir, calls.err
}

// CheckTemp makes the server's folder for the calls' TMPDIRs now rather
// than at the first command, so that a temporary folder the server cannot
// write (a read-only root file system with no volume at /tmp, a TMPDIR
// that is not a folder) stops serve at start instead of failing every
// command mid-call.
func CheckTemp() error {
	if _, err := callsDir(); err != nil {
		return fmt.Errorf("run_command: cannot make the folder of its commands' TMPDIRs in the temporary folder %s: %w; give the server a writable one (set TMPDIR, or mount a volume such as an emptyDir at /tmp)", os.TempDir(), err)
	}
	return nil
}

// makeCallsDir makes a folder for one server's calls in base, locks it, and
// removes the folders there of servers that no longer run, on a goroutine
// of its own (swept is closed after): what a killed server left may be
// large, and the first call, which makes the folder, does not wait for it.
func makeCallsDir(base string) (dir string, lock *os.File, swept <-chan struct{}, err error) {
	dir, err = os.MkdirTemp(base, callsPrefix)
	if err != nil {
		return "", nil, nil, err
	}
	// Searchable by the sessions' uids (each call's TMPDIR is theirs), not
	// listable: a command cannot learn the other calls' folder names.
	if err := os.Chmod(dir, 0o711); err != nil {
		_ = os.Remove(dir)
		return "", nil, nil, err
	}
	lock, err = os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		_ = os.RemoveAll(dir)
		return "", nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweepCalls(base, filepath.Base(dir))
	}()
	return dir, lock, done, nil
}

// sweepCalls removes the folders in base of servers that no longer run:
// those whose .lock it can take (or that have none: a server killed
// between making its folder and locking it). self is the caller's own.
func sweepCalls(base, self string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, callsPrefix) || name == self {
			continue
		}
		dir := filepath.Join(base, name)
		// Only this uid's: another user's folder of that name is not a
		// server's of this one, whatever it holds.
		var st unix.Stat_t
		if unix.Lstat(dir, &st) != nil || int(st.Uid) != os.Geteuid() {
			continue
		}
		fd, free := abandoned(dir)
		if free {
			removeAll(dir)
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// abandoned reports whether no running server holds dir's lock. It takes
// the lock to find out and returns its descriptor (or -1), for the caller
// to keep until the folder is removed.
func abandoned(dir string) (int, bool) {
	fd, err := unix.Open(filepath.Join(dir, ".lock"), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// No lock file: a folder not yet locked is microseconds old; one
		// older is a server's killed before it locked it (or one whose
		// removal another server began).
		info, serr := os.Lstat(dir)
		return -1, os.IsNotExist(err) && serr == nil && time.Since(info.ModTime()) > time.Minute
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}
