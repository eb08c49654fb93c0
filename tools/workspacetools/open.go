package workspacetools

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/workspace/usage"
)

// Env is what Open is given beside its Config: what the server decides,
// not the operator's workspace settings.
type Env struct {
	// SessionTTL is how long an idle session's folder is kept (0: 24h).
	SessionTTL time.Duration
	// MeterProvider is where the sandbox's gauge (toolwire.sandbox) goes;
	// nil publishes it nowhere.
	MeterProvider metric.MeterProvider
	// Logger gets what the sandbox does and does not enforce, once; nil
	// discards it.
	Logger *slog.Logger
}

// Set is the workspace tools over an open workspace. It owns the
// workspace (one folder, or a folder per session) and run_command's
// sandbox with its gauge; Close releases them.
type Set struct {
	tools []tools.Tool
	sb    *sandbox.Sandbox
	ws    func() error
}

// Open opens the workspace cfg names, and the sandbox when run_command is
// enabled, and makes their tools. With NoWorkspace it opens nothing and
// offers no tools. Before the sandbox starts it checks that no read-only
// path holds the sessions' folders (sandbox.Config.CheckSessionRoot); it
// logs, once, what the sandbox enforces.
func Open(cfg Config, env Env) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NoWorkspace {
		return &Set{}, nil
	}
	log := env.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rc := cfg.RunCommand
	if !rc.Enabled && (rc.Shell || len(rc.Env) > 0) {
		log.Warn("run_command settings are ignored: run_command is not enabled (--run-command)")
	}
	dir := cfg.Workspace
	if dir == "" {
		dir = "."
	}
	s := &Set{}
	opts := Options{RunCommand: rc.Enabled, Command: runcommand.Options{Shell: rc.Shell, Env: rc.Env, Allow: rc.Allow}}
	// The workspace, shared or each session's folder, is bounded for the
	// workspace tools' writes as for its commands (whose bound measures the
	// whole folder: one past it ends every command there already), and
	// keeps the disk's room. A volume with a size limit the disk does not
	// show (a Kubernetes emptyDir's sizeLimit) is kept within it only by
	// this bound: the manifests set it below the volume's.
	sbDefaults := cfg.Sandbox.WithDefaults()
	limits := workspace.Limits{MaxBytes: sbDefaults.MaxWorkspaceBytes, MaxFiles: sbDefaults.MaxWorkspaceFiles, MinFreeBytes: cfg.minFree()}
	sessions := workspace.SessionOptions{TTL: env.SessionTTL, KeyFile: cfg.SessionKeyFile, Logger: log,
		MaxSessions: cfg.MaxSessions, MaxSessionsPerCaller: cfg.MaxSessionsPerCaller, Limits: limits}
	if rc.Enabled {
		if cfg.PerSession {
			warning, err := cfg.Sandbox.CheckSessionRoot(dir)
			if err != nil {
				return nil, err
			}
			if warning != "" {
				log.Warn(warning)
			}
		}
		// Before the sessions: it decides whether each has a uid of its own.
		sb, err := startSandbox(cfg.Sandbox, env.MeterProvider, log)
		if err != nil {
			return nil, err
		}
		s.sb, opts.Command.Sandbox = sb, sb
		if err := runcommand.CheckTemp(); err != nil {
			sb.Close()
			return nil, err
		}
		if u := sb.UIDs(); u != nil {
			sessions.UIDs = &workspace.IDRange{First: u.First, Last: u.Last}
		}
	}
	ws, wsDir, err := s.open(dir, cfg.PerSession, sessions, limits)
	if err != nil {
		s.sb.Close()
		return nil, fmt.Errorf("%w (use --workspace to choose another folder or --no-workspace to serve none)", err)
	}
	if free, err := usage.Free(wsDir); err == nil && free < limits.MinFreeBytes {
		log.Warn(fmt.Sprintf("the workspace's disk has %d bytes free, less than workspace_min_free_bytes (%d): write_file, edit_file and run_command are refused until there is room", free, limits.MinFreeBytes))
	}
	s.tools = Tools(ws, opts)
	log.Info("serving workspace tools", "workspace", wsDir, "per_session", cfg.PerSession, "session_uids", sessions.UIDs != nil, "run_command", rc.Enabled, "shell", rc.Shell, "env", rc.Env)
	return s, nil
}

// open opens the folder dir as one workspace every call shares (bounded by
// shared), or, with perSession, as the root of a folder per session.
func (s *Set) open(dir string, perSession bool, opts workspace.SessionOptions, shared workspace.Limits) (workspace.Resolver, string, error) {
	if perSession {
		ss, err := workspace.OpenSessions(dir, opts)
		if err != nil {
			return nil, "", err
		}
		s.ws = ss.Close
		return ss, ss.Dir(), nil
	}
	w, err := workspace.Open(dir)
	if err != nil {
		return nil, "", err
	}
	w.SetLimits(shared)
	s.ws = w.Close
	return w, w.Dir(), nil
}

// startSandbox checks the sandbox configuration against the kernel and
// logs, once, what is and is not enforced; in required mode a missing
// restriction stops the server. What is enforced is published on mp.
func startSandbox(cfg sandbox.Config, mp metric.MeterProvider, log *slog.Logger) (*sandbox.Sandbox, error) {
	sb, r, err := sandbox.New(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Mode == sandbox.Off:
		log.Warn("sandbox off: run_command runs commands with the server's full rights (UNSAFE)", "sandbox", r.String())
	case len(r.Missing) > 0:
		log.Warn("sandbox: run_command's commands run with what this kernel enforces", "sandbox", r.String(), "restrictions", r)
	case len(r.Accepted) > 0:
		log.Info("sandbox: run_command's commands run with every restriction enforced but the gaps sandbox.accept names", "sandbox", r.String(), "restrictions", r)
	default:
		log.Info("sandbox: run_command's commands run with every restriction enforced", "sandbox", r.String(), "restrictions", r)
	}
	if l := r.Limits; l.UIDProcesses != 0 && l.UIDProcesses < l.MaxProcesses {
		log.Warn(fmt.Sprintf("run_command: every command together may hold %d processes and threads, fewer than sandbox.max_processes (%d) allows one: the server's RLIMIT_NPROC less room for its own threads (raise ulimit -u)", l.UIDProcesses, l.MaxProcesses))
	}
	for _, p := range sb.Unreadable() {
		log.Warn(fmt.Sprintf("sandbox.read_only_paths: %s does not exist, so commands cannot read it; is it misspelt?", p))
	}
	if err := r.Gauge(mp); err != nil {
		log.Warn("sandbox gauge", "error", err)
	}
	return sb, nil
}

// Tools are the workspace tools, in name order; none with NoWorkspace.
func (s *Set) Tools() []tools.Tool { return s.tools }

// Close ends the sandbox's spare supervisors and closes the workspace.
func (s *Set) Close() error {
	s.sb.Close()
	if s.ws == nil {
		return nil
	}
	return s.ws()
}
