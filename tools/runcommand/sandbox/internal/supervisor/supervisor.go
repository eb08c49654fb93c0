// Package supervisor is the sandbox's supervisor: the toolwire binary (or a
// test binary) re-executed with the hidden command "__sandbox", started by
// the server, which stays outside every restriction it puts on the command.
// It starts the command as a child that restricts itself between fork and
// execve (the session's uid, resource limits, no capabilities, no new
// privileges, Landlock, seccomp): only that child, and so the command, is
// inside the Landlock domain and under the filter, so no signal, pidfd,
// SIGIO owner or prlimit of the command reaches its supervisor. The
// supervisor then answers the system calls the filter sends it (user
// notification: what Landlock does not govern, performed beneath the
// workspace), watches the command's whole tree against the call's aggregate
// limits, ends every process of it when the call ends, and reports how the
// command ended; then, with nothing of the command left, it may wait for
// the server's next command of the same uid.
//
// It imports nothing but the standard library, golang.org/x/sys/unix and
// tools/workspace/usage (the walk it shares with the workspace tools, which
// imports no more), so that its init, which dispatches the hidden
// command, runs before the rest of a large program initialises: the Landlock ruleset and the seccomp
// program arrive ready-made from the server (package sandbox builds them),
// the program in the environment at start (Setup), the ruleset with the
// command on the connection (Spec, ConnFD).
package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Command is the hidden command line argument that makes a binary linking
// this package run as a supervisor.
const Command = "__sandbox"

// SetupEnv carries the supervisor's Setup, as JSON; the supervisor removes
// it from its environment.
const SetupEnv = "TOOLWIRE_SANDBOX_SETUP"

// ConnFD is the supervisor's end of a Unix socket pair (SOCK_SEQPACKET) with
// the server. The server
// may start a supervisor before it has a command for it (a spare, so that
// starting the binary is not on a call's path); the supervisor prepares
// what it can, then waits there for a Spec, which
// comes with descriptors: the command's output, and the Landlock ruleset
// when Spec.Landlock. Reports go back the same way, the last one carrying
// the command's Exit; when that says Again, the supervisor waits for
// another Spec. An end of file instead of a Spec means the server no
// longer needs the supervisor: it exits.
const ConnFD = 3

// MaxSpec is the largest Spec, in bytes, a supervisor takes: one message
// within a Unix socket's default send buffer (net.core.wmem_default, 208
// KiB on Linux), and as much as the single environment variable that
// carried it before (execve's 128 KiB per string).
const MaxSpec = 128 << 10

// SelfPID stands for the supervisor's PID in Setup.Filter; the supervisor
// writes its own in (and its negation for process-group forms)
// before loading the filter. No PID reaches it (pid_max is at most 2^22).
const SelfPID = 0x3fffff00

func init() {
	if len(os.Args) > 1 && os.Args[1] == Command {
		Main()
	}
}

// Limits are the resource limits a command runs under.
type Limits struct {
	CPUSeconds   uint64 `json:"cpu_seconds"`
	MemoryBytes  uint64 `json:"memory_bytes,omitempty"` // 0: none
	MaxOpenFiles uint64 `json:"max_open_files"`
	MaxFileBytes uint64 `json:"max_file_bytes"`
	// MaxProcesses caps one call's processes and threads: the supervisor
	// refuses a clone past it (and a cgroup's pids.max holds it, or the
	// watchdog).
	MaxProcesses uint64 `json:"max_processes"`
	// UIDProcesses is the commands' RLIMIT_NPROC, which counts every
	// process and thread of their uid (with the server's uid, the
	// server's own too): what the calls of one uid may hold together
	// (0: the server's own limit).
	UIDProcesses uint64 `json:"uid_processes,omitempty"`
	// The call's workspace and TMPDIR together, in bytes allocated and in
	// files and folders; 0: none.
	MaxWorkspaceBytes uint64 `json:"max_workspace_bytes,omitempty"`
	MaxWorkspaceFiles uint64 `json:"max_workspace_files,omitempty"`
}

// Filter is a seccomp program as the kernel takes it: each classic BPF
// instruction in 8 bytes, little-endian (code uint16, jt, jf uint8, k
// uint32). Carried as JSON it is base64: a supervisor decodes it at once.
type Filter []byte

// Append adds one instruction.
func (f Filter) Append(code uint16, jt, jf uint8, k uint32) Filter {
	return append(f, byte(code), byte(code>>8), jt, jf, byte(k), byte(k>>8), byte(k>>16), byte(k>>24))
}

// Setup is what every supervisor of one sandbox gets at its start, the same
// for each command.
type Setup struct {
	Limits Limits `json:"limits"`
	// Filter is the seccomp program (nil: none), with SelfPID to fill in.
	Filter Filter `json:"filter,omitempty"`
	// Notify maps the system call numbers the filter sends to the
	// supervisor to the names of the operations it performs for them
	// (package sandbox's mediated list); nil: none are sent.
	Notify map[int]string `json:"notify,omitempty"`
	// NetworkDeny: only Unix sockets; a mediated connect of any other
	// family is refused.
	NetworkDeny bool `json:"network_deny,omitempty"`
	// SwitchUser: commands run under a uid of their own (Spec.User), so a
	// spare keeps the capabilities to take it until its Spec comes.
	SwitchUser bool `json:"switch_user,omitempty"`
	// WatchMillis is how often the supervisor samples the command's tree
	// against the aggregate limits (0: 100 ms).
	WatchMillis int64 `json:"watch_ms,omitempty"`
	Parent      int   `json:"parent"` // the server's PID
}

// User is the uid and gid a session's commands run under.
type User struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Spec is one command, sent to a supervisor on ConnFD.
type Spec struct {
	Path string   `json:"path"` // the program, resolved
	Argv []string `json:"argv"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
	// Landlock says a ruleset to restrict the command to comes with the
	// Spec, with LandlockFlags for landlock_restrict_self.
	Landlock      bool   `json:"landlock"`
	LandlockFlags uint32 `json:"landlock_flags"`
	GraceMillis   int64  `json:"grace_ms"`
	// User, when set, is the uid and gid the supervisor and the command
	// take (the session's own); nil keeps the server's.
	User *User `json:"user,omitempty"`
	// Roots are the folders, symlinks resolved, where a mediated system
	// call may act (the workspace and the call's TMPDIR): metadata changes,
	// connecting to a Unix socket, locking a file. They are also what the
	// workspace limits measure.
	Roots []string `json:"roots"`
	// MinFreeBytes is the room the roots' file systems must keep: the
	// watchdog ends a command that leaves less (0: none).
	MinFreeBytes uint64 `json:"min_free_bytes,omitempty"`
	// Cgroup is the folder of the call's own cgroup (v2), which the
	// command joins before it restricts itself; "" means none, and the
	// supervisor's watchdog enforces the aggregate limits.
	Cgroup string `json:"cgroup,omitempty"`
}

// Exit is how the supervised command ended.
type Exit struct {
	Code   int    `json:"code"`             // -1 when a signal ended it
	Signal int    `json:"signal,omitempty"` // the signal number
	Limit  string `json:"limit,omitempty"`  // the limit that ended it: cpu_seconds, max_file_bytes, memory_bytes, max_processes, max_workspace_bytes, max_workspace_files, workspace_min_free_bytes, outside_lock
	Detail string `json:"detail,omitempty"` // more about the limit, when the name alone does not say it
	Error  string `json:"error,omitempty"`  // the supervisor could not run it
	// Again says the supervisor waits for another command on its
	// connection: nothing of this one is left, and its uid (the
	// session's, or the server's) is the same for the next.
	Again bool `json:"again,omitempty"`
	// Receive says how the supervisor took the command's mediated system
	// calls: ReceiveBlocking or ReceivePoller; empty when it mediated
	// none.
	Receive string `json:"receive,omitempty"`
}

// How a supervisor receives the notifications of mediated system calls
// (Exit.Receive).
const (
	// ReceiveBlocking: in a system call of a thread of its own, which the
	// kernel wakes on the caller's CPU (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
	// Linux 6.6): within microseconds.
	ReceiveBlocking = "blocking"
	// ReceivePoller: in the Go runtime's poller, whose wake-up goes
	// through the Go scheduler first (older kernels).
	ReceivePoller = "poller"
)

// Proc names one process of the command's tree: its PID and its start time
// (clock ticks after boot), so a PID used again is not mistaken for it.
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// MaxTree is how many processes of the tree a Report lists at most: the
// first ones found, parents before their children.
const MaxTree = 2000

// Report is one message from a supervisor to the server: the command's
// tree as last sampled (so the server can end it should the supervisor
// die), or, last, how the command ended.
type Report struct {
	Tree []Proc `json:"tree,omitempty"`
	Exit *Exit  `json:"exit,omitempty"`
}

var errNoStatus = errors.New("the sandbox supervisor ended without reporting the command's status")

// DecodeReport reads one report the supervisor wrote; an empty message (the
// connection's end) is errNoStatus.
func DecodeReport(b []byte) (Report, error) {
	var r Report
	if len(b) == 0 {
		return r, errNoStatus
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("sandbox supervisor report %q: %w", b, err)
	}
	return r, nil
}

// IsNoStatus reports whether err says the supervisor ended without a
// report.
func IsNoStatus(err error) bool { return errors.Is(err, errNoStatus) }
