package workspacetools

import (
	"errors"
	"flag"
	"fmt"
	"path"
	"strings"

	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
)

// Config is the operator's configuration of the workspace tools that
// "toolwire serve" offers by default. Its keys sit at the top level of the
// config file. The zero value serves the current directory's file tools,
// without run_command.
type Config struct {
	Workspace   string           `json:"workspace"`    // the folder the tools work in; "" means the current directory
	NoWorkspace bool             `json:"no_workspace"` // offer no workspace tools
	RunCommand  RunCommandConfig `json:"run_command"`
	Sandbox     sandbox.Config   `json:"sandbox"` // how run_command's commands are contained
	// PerSession gives each session_id a folder of its own under Workspace,
	// removed after session_ttl idle; calls without a session are refused.
	PerSession bool `json:"workspace_per_session"`
	// SessionKeyFile holds the key the session folders' names are an HMAC
	// under (at least 16 bytes; keep it like the tokens file). Empty: a key
	// toolwire makes, in .toolwire-key in the sessions' root. Replicas that
	// share the root share the key there.
	SessionKeyFile string `json:"session_key_file"`
	// MaxSessions bounds the session folders (0: 100,000), and
	// MaxSessionsPerCaller those of one authenticated caller (0: 1,000),
	// so that no caller can fill the server and refuse every other
	// caller's new sessions for a session_ttl.
	MaxSessions          int `json:"workspace_max_sessions"`
	MaxSessionsPerCaller int `json:"workspace_max_sessions_per_caller"`
	// MinFreeBytes is the room kept free on the workspace's file system
	// for everything else on it (the store, the logs, other sessions): a
	// write_file or edit_file that would leave less, and a command's
	// start, are refused, and the sandbox ends a command that leaves less
	// (0: DefaultMinFreeBytes; -1: none).
	MinFreeBytes int64 `json:"workspace_min_free_bytes"`
}

// DefaultMinFreeBytes is the room kept free on the workspace's file system
// unless the operator says otherwise: 1 GiB.
const DefaultMinFreeBytes = 1 << 30

// minFree is the room kept free, in bytes (0: none).
func (c Config) minFree() uint64 {
	switch {
	case c.MinFreeBytes == 0:
		return DefaultMinFreeBytes
	case c.MinFreeBytes < 0:
		return 0
	}
	return uint64(c.MinFreeBytes)
}

// RunCommandConfig configures run_command, which is off unless enabled.
type RunCommandConfig struct {
	Enabled bool     `json:"enabled"` // offer run_command
	Shell   bool     `json:"shell"`   // take a shell string run with /bin/sh -c instead of an argv
	Env     []string `json:"env"`     // names of the server's environment variables commands get
	// Allow: programs (base-name patterns) that run without a person's
	// approval; others ask first. Empty: none asks.
	Allow []string `json:"allow"`
}

// Flags registers the workspace tools' flags, the sandbox's among them, on
// fs; each writes into c.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Workspace, "workspace", c.Workspace, "`folder` the workspace tools (read_file, write_file, ...) work in (default: the current directory)")
	fs.BoolVar(&c.NoWorkspace, "no-workspace", c.NoWorkspace, "offer no workspace tools")
	fs.BoolVar(&c.PerSession, "workspace-per-session", c.PerSession, "give each session_id its own folder under --workspace, removed once idle for --session-ttl; workspace calls without a session_id are refused")
	fs.StringVar(&c.SessionKeyFile, "session-key-file", c.SessionKeyFile, "`file` holding the key the session folders' names are keyed with (default: made in .toolwire-key under --workspace)")
	fs.IntVar(&c.MaxSessions, "workspace-max-sessions", c.MaxSessions, "most session folders under --workspace with --workspace-per-session (0: 100000)")
	fs.IntVar(&c.MaxSessionsPerCaller, "workspace-max-sessions-per-caller", c.MaxSessionsPerCaller, "most session folders one authenticated caller may hold (0: 1000)")
	fs.Int64Var(&c.MinFreeBytes, "workspace-min-free-bytes", c.MinFreeBytes, "`bytes` kept free on the workspace's disk: writes and commands that would leave less are refused or ended (0: 1 GiB; -1: none)")
	fs.BoolVar(&c.RunCommand.Enabled, "run-command", c.RunCommand.Enabled, "offer run_command, which runs programs in the workspace")
	fs.BoolVar(&c.RunCommand.Shell, "run-command-shell", c.RunCommand.Shell, "run_command takes a shell command line (/bin/sh -c) instead of an argv")
	c.Sandbox.Flags(fs)
	fs.Var(nameList{&c.RunCommand.Env}, "run-command-env", "comma-separated `names` of environment variables run_command passes on (default: none; PATH is then "+runcommand.DefaultPath+")")
}

// Validate reports settings that contradict each other. The sandbox's
// settings are checked when it starts (sandbox.New), since they matter
// only with run_command.
func (c Config) Validate() error {
	// Whether or not run_command is on: "sandbox: {mode: requierd}" was
	// taken without a word, and refused only once --run-command was added.
	if err := c.Sandbox.Validate(); err != nil {
		return err
	}
	for _, pat := range c.RunCommand.Allow {
		if _, err := path.Match(pat, ""); err != nil {
			return fmt.Errorf("run_command.allow: pattern %q: %w", pat, err)
		}
	}
	if c.NoWorkspace {
		if c.RunCommand.Enabled {
			return errors.New("run_command needs the workspace; drop --no-workspace or --run-command")
		}
		if c.PerSession {
			return errors.New("--workspace-per-session needs the workspace; drop --no-workspace or --workspace-per-session")
		}
		return nil
	}
	if c.Workspace == "" && c.PerSession {
		// The current directory is rarely meant to fill with session folders.
		return errors.New("--workspace-per-session needs --workspace: the folder that holds the sessions' folders")
	}
	if c.Sandbox.UIDRange != "" && !c.PerSession && c.RunCommand.Enabled {
		// A shared workspace is the operator's folder: toolwire gives no uid
		// of its own to what it holds.
		return errors.New("sandbox.uid_range needs --workspace-per-session: each session's folder gets a uid of its own; a shared --workspace stays the server's")
	}
	if c.SessionKeyFile != "" && !c.PerSession {
		return errors.New("--session-key-file needs --workspace-per-session")
	}
	if c.MinFreeBytes < -1 {
		return errors.New("workspace_min_free_bytes must be 0 (the default, 1 GiB), -1 (none) or a number of bytes")
	}
	if c.MaxSessions < 0 || c.MaxSessionsPerCaller < 0 {
		return errors.New("workspace_max_sessions and workspace_max_sessions_per_caller must not be negative (0: the default)")
	}
	return nil
}

// nameList is a flag holding comma-separated names.
type nameList struct{ names *[]string }

func (l nameList) String() string {
	if l.names == nil {
		return ""
	}
	return strings.Join(*l.names, ",")
}

func (l nameList) Set(s string) error {
	*l.names = nil
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if strings.ContainsAny(n, "= \x00") {
			return fmt.Errorf("%q is not an environment variable name", n)
		}
		*l.names = append(*l.names, n)
	}
	return nil
}
