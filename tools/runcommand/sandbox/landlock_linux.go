package sandbox

import (
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// ruleset makes the Landlock ruleset for one command: files (read-write in
// writable, read-execute in the read-only paths and /proc, nothing else),
// TCP connect and bind (none, under network deny), and scoping of signals
// and abstract Unix sockets to the sandbox. fd is -1 when there is nothing
// to restrict; the caller closes it.
func (s *Sandbox) ruleset(writable []string) (fd int, flags uint32, err error) {
	r := s.r
	if !r.Files && !r.TCP && !r.Scoped {
		return -1, 0, nil
	}
	cfg := landlock.V6
	if !r.TCP {
		cfg.HandledAccessNet = 0
	}
	if !r.Scoped {
		cfg.Scoped = 0
	}
	if s.cfg.Mode != Required {
		cfg = cfg.BestEffort()
	}
	var rules []landlock.Rule
	if r.Files {
		// Everything RWDirs grants but making device nodes: root could
		// otherwise make one for a disk in the workspace and read it.
		rw := landlock.AccessFSSet(ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
			ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
			ll.AccessFSMakeFifo | ll.AccessFSMakeSym | ll.AccessFSTruncate | ll.AccessFSRefer)
		rules = append(rules, landlock.PathAccess(rw, writable...))
		rules = append(rules, landlock.RWFiles(writableDevices...).WithIoctlDev().IgnoreIfMissing())
		rules = append(rules, landlock.RODirs("/proc"))
		// Looked up once, in New; a path removed since is skipped.
		if len(s.readDirs) > 0 {
			rules = append(rules, landlock.RODirs(s.readDirs...).IgnoreIfMissing())
		}
		if len(s.readFiles) > 0 {
			rules = append(rules, landlock.ROFiles(s.readFiles...).IgnoreIfMissing())
		}
	} else {
		cfg.HandledAccessFS = 0
	}
	return cfg.NewRulesetFD(rules...)
}
