package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// WorkspaceConfig configures the workspace tools that "toolwire serve"
// offers by default. It is embedded in serveConfig, so its keys sit at the
// top level of the config file.
type WorkspaceConfig struct {
	Workspace   string           `json:"workspace"`    // the folder the tools work in; "" means the current directory
	NoWorkspace bool             `json:"no_workspace"` // offer no workspace tools
	RunCommand  RunCommandConfig `json:"run_command"`
	Sandbox     sandbox.Config   `json:"sandbox"` // how run_command's commands are contained (sandbox.go)
	// PerSession gives each session_id a folder of its own under Workspace,
	// removed after session_ttl idle; calls without a session are refused.
	PerSession bool `json:"workspace_per_session"`
}

// RunCommandConfig configures run_command, which is off unless enabled.
type RunCommandConfig struct {
	Enabled bool     `json:"enabled"` // offer run_command
	Shell   bool     `json:"shell"`   // take a shell string run with /bin/sh -c instead of an argv
	Env     []string `json:"env"`     // names of the server's environment variables commands get
}

// workspaceFlags adds the workspace tools' flags to fs, writing into cfg.
func workspaceFlags(fs *flag.FlagSet, cfg *WorkspaceConfig) {
	fs.StringVar(&cfg.Workspace, "workspace", cfg.Workspace, "`folder` the workspace tools (read_file, write_file, ...) work in (default: the current directory)")
	fs.BoolVar(&cfg.NoWorkspace, "no-workspace", cfg.NoWorkspace, "offer no workspace tools")
	fs.BoolVar(&cfg.PerSession, "workspace-per-session", cfg.PerSession, "give each session_id its own folder under --workspace, removed once idle for --session-ttl; workspace calls without a session_id are refused")
	fs.BoolVar(&cfg.RunCommand.Enabled, "run-command", cfg.RunCommand.Enabled, "offer run_command, which runs programs in the workspace")
	fs.BoolVar(&cfg.RunCommand.Shell, "run-command-shell", cfg.RunCommand.Shell, "run_command takes a shell command line (/bin/sh -c) instead of an argv")
	sandboxFlags(fs, &cfg.Sandbox)
	fs.Var(nameList{&cfg.RunCommand.Env}, "run-command-env", "comma-separated `names` of environment variables run_command passes on (default: none; PATH is then "+runcommand.DefaultPath+")")
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

// addWorkspaceTools opens the workspace and adds its tools to reg, unless
// cfg turns them off. sessionTTL is how long an idle session's folder is
// kept (0: 24h). The returned function closes the workspace and ends the
// sandbox's spare supervisors.
func addWorkspaceTools(reg *tools.Registry, cfg WorkspaceConfig, sessionTTL time.Duration, log *slog.Logger) (closeWorkspace func(), err error) {
	rc := cfg.RunCommand
	if cfg.NoWorkspace {
		if rc.Enabled {
			return nil, cmdUsageError("serve", "serve: run_command needs the workspace; drop --no-workspace or --run-command")
		}
		if cfg.PerSession {
			return nil, cmdUsageError("serve", "serve: --workspace-per-session needs the workspace; drop --no-workspace or --workspace-per-session")
		}
		return func() {}, nil
	}
	if !rc.Enabled && (rc.Shell || len(rc.Env) > 0) {
		log.Warn("run_command settings are ignored: run_command is not enabled (--run-command)")
	}
	dir := cfg.Workspace
	if dir == "" && cfg.PerSession {
		// The current directory is rarely meant to fill with session folders.
		return nil, cmdUsageError("serve", "serve: --workspace-per-session needs --workspace: the folder that holds the sessions' folders")
	}
	if dir == "" {
		dir = "."
	}
	ws, wsDir, closeWS, err := openWorkspace(dir, cfg.PerSession, sessionTTL, log)
	if err != nil {
		return nil, fmt.Errorf("serve: %w (use --workspace to choose another folder or --no-workspace to serve none)", err)
	}
	opts := workspacetools.Options{RunCommand: rc.Enabled, Command: runcommand.Options{Shell: rc.Shell, Env: rc.Env}}
	if rc.Enabled {
		if cfg.PerSession {
			if err := checkSessionRoot(cfg.Sandbox, wsDir, log); err != nil {
				return nil, errors.Join(err, closeWS())
			}
		}
		sb, err := startSandbox(cfg.Sandbox, log)
		if err != nil {
			return nil, errors.Join(err, closeWS())
		}
		opts.Command.Sandbox = sb
	}
	if err := reg.Add(workspacetools.Tools(ws, opts)...); err != nil {
		opts.Command.Sandbox.Close()
		return nil, errors.Join(err, closeWS())
	}
	log.Info("serving workspace tools", "workspace", wsDir, "per_session", cfg.PerSession, "run_command", rc.Enabled, "shell", rc.Shell, "env", rc.Env)
	return func() { opts.Command.Sandbox.Close(); closeWS() }, nil
}

// openWorkspace opens the folder dir as one workspace every call shares,
// or, with perSession, as the root of a folder per session.
func openWorkspace(dir string, perSession bool, sessionTTL time.Duration, log *slog.Logger) (ws workspace.Resolver, wsDir string, closeWS func() error, err error) {
	if perSession {
		s, err := workspace.OpenSessions(dir, workspace.SessionOptions{TTL: sessionTTL, Logger: log})
		if err != nil {
			return nil, "", nil, err
		}
		return s, s.Dir(), s.Close, nil
	}
	w, err := workspace.Open(dir)
	if err != nil {
		return nil, "", nil, err
	}
	return w, w.Dir(), w.Close, nil
}
