package main

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// WorkspaceConfig is workspacetools.Config under a name of its own, so
// that it can be embedded in serveConfig beside the other features'
// Configs.
type WorkspaceConfig = workspacetools.Config

// addWorkspaceTools opens the workspace and adds its tools to reg, unless
// cfg turns them off. sessionTTL is how long an idle session's folder is
// kept (0: 24h); mp is where the sandbox's gauge goes (nil: nowhere). The
// returned function closes the workspace and ends the sandbox's spare
// supervisors.
func addWorkspaceTools(reg *tools.Registry, cfg WorkspaceConfig, sessionTTL time.Duration, mp metric.MeterProvider, log *slog.Logger) (closeWorkspace func(), err error) {
	rc := cfg.RunCommand
	if err := cfg.Validate(); err != nil {
		return nil, cmdUsageError("serve", "serve: %v", err)
	}
	if cfg.NoWorkspace {
		return func() {}, nil
	}
	if !rc.Enabled && (rc.Shell || len(rc.Env) > 0) {
		log.Warn("run_command settings are ignored: run_command is not enabled (--run-command)")
	}
	dir := cfg.Workspace
	if dir == "" {
		dir = "."
	}
	opts := workspacetools.Options{RunCommand: rc.Enabled, Command: runcommand.Options{Shell: rc.Shell, Env: rc.Env, Allow: rc.Allow}}
	sessions := workspace.SessionOptions{TTL: sessionTTL, KeyFile: cfg.SessionKeyFile, Logger: log}
	if rc.Enabled {
		if cfg.PerSession {
			if err := checkSessionRoot(cfg.Sandbox, dir, log); err != nil {
				return nil, err
			}
		}
		// Before the sessions: it decides whether each has a uid of its own.
		sb, err := startSandbox(cfg.Sandbox, mp, log)
		if err != nil {
			return nil, err
		}
		opts.Command.Sandbox = sb
		if u := sb.UIDs(); u != nil {
			sessions.UIDs = &workspace.IDRange{First: u.First, Last: u.Last}
		}
	}
	ws, wsDir, closeWS, err := openWorkspace(dir, cfg.PerSession, sessions)
	if err != nil {
		opts.Command.Sandbox.Close()
		return nil, fmt.Errorf("serve: %w (use --workspace to choose another folder or --no-workspace to serve none)", err)
	}
	if err := reg.Add(workspacetools.Tools(ws, opts)...); err != nil {
		opts.Command.Sandbox.Close()
		return nil, errors.Join(err, closeWS())
	}
	log.Info("serving workspace tools", "workspace", wsDir, "per_session", cfg.PerSession, "session_uids", sessions.UIDs != nil, "run_command", rc.Enabled, "shell", rc.Shell, "env", rc.Env)
	return func() { opts.Command.Sandbox.Close(); closeWS() }, nil
}

// openWorkspace opens the folder dir as one workspace every call shares,
// or, with perSession, as the root of a folder per session.
func openWorkspace(dir string, perSession bool, opts workspace.SessionOptions) (ws workspace.Resolver, wsDir string, closeWS func() error, err error) {
	if perSession {
		s, err := workspace.OpenSessions(dir, opts)
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
