// Package supervisor is the sandbox's supervisor process: the toolwire
// binary (or a test binary) re-executed with the hidden command "__sandbox".
// It imports nothing but the standard library and golang.org/x/sys/unix, so
// that its init, which dispatches the hidden command, runs before the rest
// of a large program initialises: the Landlock ruleset and the seccomp
// program arrive ready-made from the server (package sandbox builds them),
// the program in its environment at start (Setup), the ruleset with the
// command on its connection (Spec, ConnFD).
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
// the server. The server may start a supervisor before it has a command for
// it (a spare, so that starting the binary is not on a call's path); the
// supervisor prepares what it can, then waits there for one Spec, which
// comes with descriptors: the command's output, and the Landlock ruleset when
// Spec.Landlock. The command's Exit goes back the same way. An end of file
// instead of a Spec means the server no longer needs the spare: it exits.
const ConnFD = 3

// MaxSpec is the largest Spec, in bytes, a supervisor takes: one message
// within a Unix socket's default send buffer (net.core.wmem_default, 208
// KiB on Linux), and as much as the single environment variable that
// carried it before (execve's 128 KiB per string).
const MaxSpec = 128 << 10

// SelfPID stands for the supervisor's PID in Spec.Filter; the supervisor
// writes its own in (and its negation for process-group forms) before
// loading the filter. No PID reaches it (pid_max is at most 2^22).
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
	MaxProcesses uint64 `json:"max_processes"`
}

// Insn is one classic BPF instruction of the seccomp filter.
type Insn struct {
	Op     uint16 `json:"op"`
	Jt, Jf uint8
	K      uint32 `json:"k"`
}

// Setup is what every supervisor of one sandbox gets at its start, the same
// for each command.
type Setup struct {
	Limits Limits `json:"limits"`
	// Filter is the seccomp program (nil: none), with SelfPID to fill in.
	Filter []Insn `json:"filter,omitempty"`
	Parent int    `json:"parent"` // the server's PID
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
}

// Exit is how the supervised command ended.
type Exit struct {
	Code   int    `json:"code"`             // -1 when a signal ended it
	Signal int    `json:"signal,omitempty"` // the signal number
	Limit  string `json:"limit,omitempty"`  // the limit that ended it: cpu_seconds, max_file_bytes
	Error  string `json:"error,omitempty"`  // the supervisor could not run it
}

var errNoStatus = errors.New("the sandbox supervisor ended without reporting the command's status")

// DecodeExit reads the status the supervisor wrote.
func DecodeExit(b []byte) (Exit, error) {
	var e Exit
	if len(b) == 0 {
		return e, errNoStatus
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("sandbox supervisor status %q: %w", b, err)
	}
	return e, nil
}
