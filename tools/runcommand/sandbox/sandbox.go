// Package sandbox runs run_command's commands under a supervisor in a
// kernel sandbox, without privileges: the toolwire binary (or a test binary)
// re-executed with the hidden command "__sandbox" (package supervisor). The
// supervisor makes itself a child subreaper with a parent-death signal,
// drops capabilities, applies resource limits, no-new-privileges, Landlock
// (files, TCP, signal and abstract-socket scoping) and a seccomp filter,
// then starts the command as its child; when the command ends, is
// cancelled, or the server dies, it kills every process the command started
// (setsid and double-forked ones too: as subreaper it inherits them) before
// it exits.
//
// This package is the server's side: the configuration, what the kernel
// offers, the Landlock ruleset and seccomp program (built here, with
// go-landlock and go-seccomp-bpf, so the supervisor needs neither), and
// starting supervisors: ahead of the calls, as spares that wait for a
// command on a Unix socket, and kept after a command, warm, for the next of
// the same uid, so that a call does not wait for the binary to start
// (pool_linux.go). Any binary that links it dispatches the hidden
// command in package supervisor's init, before the rest of the program
// initialises; that keeps the supervisor's start cheap and lets test
// binaries serve as supervisors.
//
// It imports only its supervisor and the kernel libraries (go-landlock, go-
// seccomp-bpf, x/sys): nothing of tools/ or above, so the supervisor's
// binary stays small.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/toolwire/toolwire/tools/runcommand/sandbox/internal/supervisor"
)

// Command is the hidden command line argument that makes a binary linking
// this package run as a supervisor (package supervisor dispatches it).
const Command = supervisor.Command

// Exit is how a supervised command ended.
type Exit = supervisor.Exit

// Limits are the resource limits a command runs under.
type Limits = supervisor.Limits

// Spares is how many supervisors a Sandbox keeps started and waiting for a
// command, from its first command until Close. Starting one (the binary and
// the Go runtime) is most of what the sandbox would cost a command; a spare
// has done it before the call comes. Under load a start can take longer
// than a short command, so the oldest of two serves while the other gets
// ready; calls at the same time past them start their own.
const Spares = 2

// Warm is how many supervisors that ran a command a Sandbox keeps waiting
// for another command of the same uid, used last first: one that has
// nothing left of its command waits for the next instead of exiting, so
// that a command finds a supervisor started and with its uid (the
// session's, or the server's), and starts no process but its own.
const Warm = 8

// Mode says how much the sandbox must enforce.
type Mode string

const (
	// Auto enforces what the kernel offers and says what it does not.
	Auto Mode = "auto"
	// Required refuses to start unless every restriction can be enforced.
	Required Mode = "required"
	// Off runs commands with the server's full rights (unsafe).
	Off Mode = "off"
)

// Network values.
const (
	NetworkDeny  = "deny"
	NetworkAllow = "allow"
)

// Config is the operator's sandbox configuration (config key "sandbox").
// Zero values mean the defaults noted on each field.
type Config struct {
	// Mode is auto (default), required or off.
	Mode Mode `json:"mode"`
	// Network is deny (default: no TCP connect or bind, no sockets but Unix
	// ones) or allow.
	Network string `json:"network"`
	// ReadOnlyPaths are the files and folders commands may read and execute
	// (default DefaultReadOnlyPaths). /proc is always readable: the
	// supervisor needs it, and so do most runtimes.
	ReadOnlyPaths []string `json:"read_only_paths"`
	// CPUSeconds caps each process's CPU time (RLIMIT_CPU; default 600).
	CPUSeconds uint64 `json:"cpu_seconds"`
	// MemoryBytes caps each process's address space (RLIMIT_AS; default 0,
	// no limit: Node, the JVM and Go reserve far more address space than
	// they use, so a tight cap breaks them).
	MemoryBytes uint64 `json:"memory_bytes"`
	// MaxOpenFiles caps each process's open files (RLIMIT_NOFILE; default 4096).
	MaxOpenFiles uint64 `json:"max_open_files"`
	// MaxFileBytes caps the size of any file a process writes (RLIMIT_FSIZE;
	// default 1 GiB).
	MaxFileBytes uint64 `json:"max_file_bytes"`
	// MaxProcesses caps the processes and threads of one call's command:
	// the supervisor refuses a clone, fork or vfork that would pass it
	// (EAGAIN, as the kernel's own limit does), and its watchdog (or the
	// call's cgroup's pids.max) ends a tree that passes it anyway. Default
	// 1024. What every call of a uid holds together is RLIMIT_NPROC's, set
	// to the server's own less ServerThreads (see Limits.UIDProcesses).
	MaxProcesses uint64 `json:"max_processes"`
	// MaxWorkspaceBytes caps the bytes the workspace and the call's TMPDIR
	// hold together, measured while a command runs; a command that passes
	// it is ended (default 8 GiB).
	MaxWorkspaceBytes uint64 `json:"max_workspace_bytes"`
	// MaxWorkspaceFiles caps the files and folders they hold (default
	// 500000).
	MaxWorkspaceFiles uint64 `json:"max_workspace_files"`
	// UIDRange, "FIRST-LAST", gives each session's commands (with a
	// workspace per session) a uid and gid of their own from the range,
	// owning the session's folder, when the server may: as root, or with
	// CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER and
	// CAP_KILL. The kernel's own permission checks then keep sessions apart
	// from each other and from the server. Empty: commands run under the
	// server's uid.
	UIDRange string `json:"uid_range"`
	// SysVIPC lets commands use System V shared memory, message queues and
	// semaphores, which every process of the same uid shares and which
	// outlive the call (default false: denied).
	SysVIPC bool `json:"sysv_ipc"`
	// Accept names the gaps required mode may start with, each one the
	// operator has weighed: "owner_files" (commands share the server's uid,
	// so they may read files under read_only_paths that only that uid may
	// read).
	Accept []string `json:"accept"`
}

// Gaps required mode refuses to start with unless Config.Accept names them.
const (
	// GapOwnerFiles: commands run under the server's uid (no uid_range, or
	// no privilege to use it) and may read what it may read under the
	// read-only paths.
	GapOwnerFiles = "owner_files"
)

// DefaultReadOnlyPaths are the system folders and devices commands may read
// and execute by default.
var DefaultReadOnlyPaths = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	"/dev/random", "/dev/urandom",
	"/sys/fs/cgroup", "/sys/devices/system/cpu", "/sys/kernel/mm/transparent_hugepage",
}

// ServerThreads is the room the commands' RLIMIT_NPROC leaves the server
// under its own (which counts the same uid's processes and threads, the
// commands' too, when they run under the server's uid): the server's
// threads, however many calls its commands hold, up to this many.
const ServerThreads = 256

// writableDevices may be read and written by every command.
var writableDevices = []string{"/dev/null", "/dev/zero", "/dev/full"}

// WithDefaults returns c with its zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	if c.Mode == "" {
		c.Mode = Auto
	}
	if c.Network == "" {
		c.Network = NetworkDeny
	}
	if c.ReadOnlyPaths == nil {
		c.ReadOnlyPaths = DefaultReadOnlyPaths
	}
	if c.CPUSeconds == 0 {
		c.CPUSeconds = 600
	}
	if c.MaxOpenFiles == 0 {
		c.MaxOpenFiles = 4096
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = 1 << 30
	}
	if c.MaxProcesses == 0 {
		c.MaxProcesses = 1024
	}
	if c.MaxWorkspaceBytes == 0 {
		c.MaxWorkspaceBytes = 8 << 30
	}
	if c.MaxWorkspaceFiles == 0 {
		c.MaxWorkspaceFiles = 500000
	}
	return c
}

// Validate reports the first setting that is not valid.
func (c Config) Validate() error {
	switch c.Mode {
	case "", Auto, Required, Off:
	default:
		return fmt.Errorf("sandbox.mode %q: want auto, required or off", c.Mode)
	}
	switch c.Network {
	case "", NetworkDeny, NetworkAllow:
	default:
		return fmt.Errorf("sandbox.network %q: want deny or allow", c.Network)
	}
	for _, p := range c.ReadOnlyPaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("sandbox.read_only_paths: %q is not an absolute path", p)
		}
	}
	if c.MemoryBytes != 0 && c.MemoryBytes < 64<<20 {
		return fmt.Errorf("sandbox.memory_bytes %d: want 0 (no limit) or at least 64 MiB; the supervisor itself needs room", c.MemoryBytes)
	}
	if c.UIDRange != "" {
		if _, err := ParseUIDRange(c.UIDRange); err != nil {
			return err
		}
	}
	for _, a := range c.Accept {
		if a != GapOwnerFiles {
			return fmt.Errorf("sandbox.accept: %q is not a gap required mode knows; the one it knows is %s", a, GapOwnerFiles)
		}
	}
	return nil
}

// UIDRange is a range of uids, each used as a session's uid and gid.
type UIDRange struct{ First, Last uint32 }

// Len is how many uids the range holds.
func (r UIDRange) Len() int { return int(r.Last-r.First) + 1 }

// ParseUIDRange reads "FIRST-LAST". The range may not hold 0, the server's
// own uid, or uids past 2^31-2.
func ParseUIDRange(s string) (UIDRange, error) {
	first, last, ok := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(strings.TrimSpace(first), 10, 32)
	b, err2 := strconv.ParseUint(strings.TrimSpace(last), 10, 32)
	r := UIDRange{uint32(a), uint32(b)}
	switch {
	case !ok || err1 != nil || err2 != nil:
		return r, fmt.Errorf("sandbox.uid_range %q: want FIRST-LAST, such as 100000-165535", s)
	case a == 0 || b < a || b > 1<<31-2:
		return r, fmt.Errorf("sandbox.uid_range %q: want 0 < FIRST <= LAST < 2147483647", s)
	case uint64(os.Geteuid()) >= a && uint64(os.Geteuid()) <= b:
		return r, fmt.Errorf("sandbox.uid_range %q holds the server's own uid %d", s, os.Geteuid())
	}
	return r, nil
}

// Restrictions say what the sandbox enforces on this machine; run_command
// reports them in each result's details.
type Restrictions struct {
	Mode Mode `json:"mode"`
	// LandlockABI is the kernel's Landlock ABI version (0: none).
	LandlockABI int `json:"landlock_abi,omitempty"`
	// Files: Landlock confines writes to the workspace and the call's
	// TMPDIR, and reads to those and the read-only paths.
	Files bool `json:"files"`
	// Network is deny or allow; under deny, TCP says Landlock refuses TCP
	// connect and bind, and Sockets that seccomp refuses non-Unix sockets.
	Network string `json:"network"`
	TCP     bool   `json:"tcp,omitempty"`
	Sockets bool   `json:"sockets,omitempty"`
	// Syscalls: the seccomp filter (ptrace, mount, namespaces, ...; signals
	// to the supervisor and the server; limits and scheduling of other
	// processes; set-ID bits; datagram Unix sockets; System V IPC unless
	// allowed).
	Syscalls bool `json:"syscalls"`
	// Mediated: the supervisor performs, beneath the workspace and TMPDIR
	// only, the calls Landlock does not govern: metadata changes (mode,
	// owner, times, extended attributes, inode flags), connects and binds
	// of Unix sockets by path, locks, inotify watches; and those that
	// could hide a file from the accounting (memfd_create, O_TMPFILE,
	// unlink, rename); and it counts the processes the command makes
	// (seccomp user notification).
	Mediated bool `json:"mediated"`
	// Scoped: Landlock stops signals and abstract Unix sockets reaching
	// processes outside the command's domain, the supervisor's included.
	Scoped     bool `json:"scoped"`
	NoNewPrivs bool `json:"no_new_privs"`
	// Identity is "session" (each session's commands and folder have a uid
	// of their own) or "server" (commands run under the server's uid).
	Identity string `json:"identity"`
	// Aggregate says what enforces the limits over a call's whole tree
	// (memory, processes): "cgroup" (a delegated cgroup v2) or "watchdog"
	// (the supervisor samples the tree and ends it).
	Aggregate string `json:"aggregate"`
	// SysVIPC: System V IPC is allowed (sandbox.sysv_ipc).
	SysVIPC bool   `json:"sysv_ipc,omitempty"`
	Limits  Limits `json:"limits"`
	// Missing names what auto mode could not enforce here; Accepted, what
	// required mode started without because sandbox.accept names it.
	Missing  []string `json:"missing,omitempty"`
	Accepted []string `json:"accepted,omitempty"`
}

// String is the one-line summary logged at start.
func (r Restrictions) String() string {
	if r.Mode == Off {
		return "off: commands run with the server's full rights (unsafe)"
	}
	var on []string
	add := func(ok bool, what string) {
		if ok {
			on = append(on, what)
		}
	}
	add(r.Files, fmt.Sprintf("files (Landlock ABI %d)", r.LandlockABI))
	add(r.TCP, "network: TCP connect and bind denied (Landlock)")
	add(r.Sockets, "network: non-Unix sockets denied (seccomp)")
	add(r.Network == NetworkAllow, "network: allowed")
	add(r.Syscalls, "system calls (seccomp)")
	add(r.Mediated, "metadata, Unix socket paths and locks only beneath the workspace, files without a name and processes counted (supervisor)")
	add(r.Scoped, "signals and abstract sockets scoped (Landlock)")
	add(r.NoNewPrivs, "no new privileges or capabilities")
	add(r.Identity == IdentitySession, "a uid per session")
	add(r.SysVIPC, "System V IPC allowed")
	on = append(on, "resource limits", "aggregate limits ("+r.Aggregate+")", "no process outlives its call")
	s := string(r.Mode) + ": " + strings.Join(on, ", ")
	if len(r.Missing) > 0 {
		s += "; NOT enforced: " + strings.Join(r.Missing, ", ")
	}
	if len(r.Accepted) > 0 {
		s += "; accepted gaps: " + strings.Join(r.Accepted, ", ")
	}
	return s
}

// Identity values.
const (
	IdentitySession = "session"
	IdentityServer  = "server"
)

// Sandbox starts commands under the supervisor. The zero value is not
// usable; call New.
type Sandbox struct {
	cfg     Config
	r       Restrictions
	exe     string    // the binary re-executed as supervisor
	setup   []byte    // every supervisor's supervisor.Setup, as JSON
	pool    *pool     // spare supervisors
	uids    *UIDRange // the sessions' uids, when they have their own
	cgroups *cgroups  // the calls' cgroups, when a delegated cgroup v2 is available

	// The read-only paths, looked up once when New made the sandbox:
	// the folders and the files among them, and the configured ones that
	// did not exist (see Unreadable).
	readDirs, readFiles, unreadable []string
}

// New checks cfg against what the kernel offers. In required mode it fails,
// naming what is missing; in auto mode the Restrictions say what is not
// enforced. A nil Sandbox (with no error) means mode off.
func New(cfg Config) (*Sandbox, Restrictions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Restrictions{}, err
	}
	configured := cfg.ReadOnlyPaths != nil // not the defaults
	cfg = cfg.WithDefaults()
	if cfg.Mode == Off {
		return nil, Restrictions{Mode: Off, Network: NetworkAllow}, nil
	}
	r := probe(cfg)
	sb := &Sandbox{cfg: cfg}
	if cfg.UIDRange != "" {
		if why := cannotSwitchUser(); why != "" {
			r.Missing = append(r.Missing, "a uid per session ("+why+")")
		} else {
			u, _ := ParseUIDRange(cfg.UIDRange)
			sb.uids = &u
			r.Identity = IdentitySession
		}
	}
	if r.Identity != IdentitySession {
		gap := GapOwnerFiles + ": commands run under the server's uid and may read the files only it may read under read_only_paths (set sandbox.uid_range, or accept it with sandbox.accept: [" + GapOwnerFiles + "])"
		if slices.Contains(cfg.Accept, GapOwnerFiles) {
			r.Accepted = append(r.Accepted, GapOwnerFiles)
		} else {
			r.Missing = append(r.Missing, gap)
		}
	}
	sb.cgroups, r.Aggregate = findCgroups(cfg)
	if cfg.Mode == Required && len(r.Missing) > 0 {
		return nil, r, fmt.Errorf("sandbox required, but this server cannot enforce: %s (use sandbox.mode auto to run with what it offers)", strings.Join(r.Missing, "; "))
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, r, fmt.Errorf("sandbox: finding the binary to run as supervisor: %w", err)
	}
	setup := supervisor.Setup{Limits: r.Limits, Parent: os.Getpid(), NetworkDeny: cfg.Network == NetworkDeny, SwitchUser: sb.uids != nil}
	if r.Syscalls {
		if setup.Filter, setup.Notify, err = filter(rules{sockets: r.Sockets, sysvIPC: cfg.SysVIPC, notify: r.Mediated}); err != nil {
			return nil, r, fmt.Errorf("sandbox: building the seccomp filter: %w", err)
		}
	}
	b, err := json.Marshal(setup)
	if err != nil {
		return nil, r, err
	}
	sb.r, sb.exe, sb.setup = r, exe, b
	for _, p := range cfg.ReadOnlyPaths {
		info, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if configured { // a missing default, such as /lib32, is normal
				sb.unreadable = append(sb.unreadable, p)
			}
		case err != nil:
		case info.IsDir():
			sb.readDirs = append(sb.readDirs, p)
		default:
			sb.readFiles = append(sb.readFiles, p)
		}
	}
	sb.pool = newPool(sb)
	return sb, r, nil
}

// UIDs returns the range of the sessions' uids, or nil when commands run
// under the server's.
func (s *Sandbox) UIDs() *UIDRange {
	if s == nil {
		return nil
	}
	return s.uids
}

// Unreadable returns the configured read-only paths that did not exist when
// New made the sandbox, most likely misspelt: commands cannot read them,
// even if they appear later. A missing default path is not among them.
func (s *Sandbox) Unreadable() []string {
	if s == nil {
		return nil
	}
	return s.unreadable
}

// Close ends the spare supervisors, which would otherwise wait until the
// server exits. Commands running go on; later ones each start a
// supervisor of their own.
func (s *Sandbox) Close() {
	if s != nil {
		s.pool.close()
	}
}

// Restrictions returns what s enforces.
func (s *Sandbox) Restrictions() Restrictions { return s.r }

// Config returns s's configuration, defaults filled in.
func (s *Sandbox) Config() Config { return s.cfg }
