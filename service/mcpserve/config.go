package mcpserve

import (
	"errors"
	"flag"
	"log/slog"
	"time"
)

// Config is the MCP surface's configuration; its keys sit at the top
// level of serve's config file. The zero value serves /mcp on the HTTP
// port whenever there is one (http_listen), with the default bounds.
type Config struct {
	// Off serves no /mcp (flag --no-mcp).
	Off bool `json:"no_mcp"`
	// MaxSessions bounds the 2025-11-25 sessions open at once (flag
	// --mcp-max-sessions); past it a new session closes the session idle
	// longest of the caller holding the most. 0: DefaultMaxSessions.
	MaxSessions int `json:"mcp_max_sessions"`
	// MaxSessionsPerCaller bounds one caller's sessions (flag
	// --mcp-max-sessions-per-caller); past it a new session closes the
	// caller's session idle longest. 0: DefaultMaxSessionsPerCaller.
	MaxSessionsPerCaller int `json:"mcp_max_sessions_per_caller"`
	// SessionIdleTimeout closes a session with no request in flight (an
	// open GET stream counts as one) for this long (flag
	// --mcp-session-idle-timeout). 0: DefaultSessionTimeout.
	SessionIdleTimeout time.Duration `json:"mcp_session_idle_timeout"`
}

// Flags registers c's flags on fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Off, "no-mcp", c.Off, "serve no MCP endpoint (/mcp) on the HTTP port")
	fs.IntVar(&c.MaxSessions, "mcp-max-sessions", c.MaxSessions, "most MCP sessions (2025-11-25) open at once; past it a new one closes the session idle longest (0: 1000)")
	fs.IntVar(&c.MaxSessionsPerCaller, "mcp-max-sessions-per-caller", c.MaxSessionsPerCaller, "most MCP sessions one caller holds; past it its new one closes its session idle longest (0: 100)")
	fs.DurationVar(&c.SessionIdleTimeout, "mcp-session-idle-timeout", c.SessionIdleTimeout, "close an MCP session with no request in flight for this long (0: 10m)")
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxSessions < 0:
		return errors.New("mcp_max_sessions: want a positive number (0: the default)")
	case c.MaxSessionsPerCaller < 0:
		return errors.New("mcp_max_sessions_per_caller: want a positive number (0: the default)")
	case c.SessionIdleTimeout < 0:
		return errors.New("mcp_session_idle_timeout: want a positive duration (0: the default)")
	}
	return nil
}

// Options are the Server options c sets, with log and version.
func (c Config) Options(log *slog.Logger, version string) Options {
	return Options{Logger: log, Version: version, SessionTimeout: c.SessionIdleTimeout, MaxSessions: c.MaxSessions, MaxSessionsPerCaller: c.MaxSessionsPerCaller}
}
