package sandbox

import (
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// restrictFiles applies Landlock to the calling thread, which must be
// locked and have no-new-privileges: files (read-write in sp.Writable,
// read-execute in sp.ReadOnly and /proc, nothing else), TCP connect and bind
// (none, under network deny), and scoping of signals and abstract Unix
// sockets to the sandbox. The command, forked from this thread, inherits it;
// restricting every thread of the supervisor (go-landlock's Restrict) costs
// a signal round to each before Landlock ABI 8, and gains nothing.
func restrictFiles(sp spec) error {
	if !sp.Files && !sp.TCP && !sp.Scoped {
		return nil
	}
	cfg := landlock.V6
	if !sp.TCP {
		cfg.HandledAccessNet = 0
	}
	if !sp.Scoped {
		cfg.Scoped = 0
	}
	if sp.BestEffort {
		cfg = cfg.BestEffort()
	}
	var rules []landlock.Rule
	if sp.Files {
		// Everything RWDirs grants but making device nodes: root could
		// otherwise make one for a disk in the workspace and read it.
		rw := landlock.AccessFSSet(ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
			ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
			ll.AccessFSMakeFifo | ll.AccessFSMakeSym | ll.AccessFSTruncate | ll.AccessFSRefer)
		rules = append(rules, landlock.PathAccess(rw, sp.Writable...))
		rules = append(rules, landlock.RWFiles(writableDevices...).WithIoctlDev().IgnoreIfMissing())
		rules = append(rules, landlock.RODirs("/proc"))
		for _, p := range sp.ReadOnly {
			info, err := os.Stat(p)
			switch {
			case err != nil:
				continue // a missing default such as /lib32
			case info.IsDir():
				rules = append(rules, landlock.RODirs(p))
			default:
				rules = append(rules, landlock.ROFiles(p))
			}
		}
	} else {
		cfg.HandledAccessFS = 0
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	return ll.LandlockRestrictSelf(fd, flags)
}
