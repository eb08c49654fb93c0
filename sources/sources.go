// Package sources owns the tools that come from outside the binary and are
// declared in the config file: HTTP APIs (sources/http), MCP servers
// (sources/mcp) and other toolwire servers (sources/remote). Each is a
// Source of its part of Config; Set is all of them, the Source of the
// whole Config that sources/reload keeps in step with the file. A source
// owns its tools in the registry as tools.Registry.Source(id), which also
// settles names two sources offer (docs/sources.md, "Names").
//
// A new kind of source is a package here with its config type and a
// Source of it, a field in Config, and a line in New, in Config's Empty and
// LogAttrs, and in each of Set's methods.
//
// sources and its packages must not import engine/, service/, store/ or
// cmd/: they reach the server only through the registry
// (docs/architecture.md).
package sources

import (
	"context"
	"errors"
	"log/slog"

	httpsource "github.com/toolwire/toolwire/sources/http"
	mcpsource "github.com/toolwire/toolwire/sources/mcp"
	"github.com/toolwire/toolwire/sources/remote"
	"github.com/toolwire/toolwire/tools"
)

// Source is one kind of tool source, configured by C: its part of the
// config file.
type Source[C any] interface {
	// Check reports whether cfg can be applied, changing nothing. Reload
	// checks every source before it syncs any, so an invalid file changes
	// nothing.
	Check(cfg C) error
	// Sync makes the source serve what cfg declares: new tools come, tools
	// no longer declared go, each source's in one registry update. It does
	// not wait for connections, which live until Close or a later Sync;
	// ctx bounds only the call. An error leaves the source's previous
	// tools served.
	Sync(ctx context.Context, cfg C) error
	// Close stops the source, removes its tools and waits for its
	// background work, calls in flight included.
	Close() error
}

// Config is the part of the serve configuration that declares tool
// sources. It is embedded in serve's config, so its keys sit at the top
// level of the file.
type Config struct {
	HTTPTools  []httpsource.Spec        `json:"http_tools"` // declarative HTTP tools
	MCPServers []mcpsource.ServerConfig `json:"mcp_servers,omitempty"`
	Remotes    []remote.Config          `json:"remotes,omitempty"`
}

// Empty reports whether cfg declares no source.
func (cfg Config) Empty() bool {
	return len(cfg.HTTPTools) == 0 && len(cfg.MCPServers) == 0 && len(cfg.Remotes) == 0
}

// LogAttrs are the names of what cfg declares, per key, for a log line:
// [] rather than null when there are none.
func (cfg Config) LogAttrs() []any {
	return []any{
		"http_tools", names(cfg.HTTPTools, func(s httpsource.Spec) string { return s.Name }),
		"mcp_servers", names(cfg.MCPServers, func(s mcpsource.ServerConfig) string { return s.Name }),
		"remotes", names(cfg.Remotes, func(s remote.Config) string { return s.Name }),
	}
}

func names[S any](specs []S, name func(S) string) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = name(s)
	}
	return out
}

// Set is every source of one server.
type Set struct {
	http    *httpsource.Source
	mcp     *mcpsource.Gateway
	remotes *remote.Mounts
}

var (
	_ Source[Config]                   = (*Set)(nil)
	_ Source[[]httpsource.Spec]        = (*httpsource.Source)(nil)
	_ Source[[]mcpsource.ServerConfig] = (*mcpsource.Gateway)(nil)
	_ Source[[]remote.Config]          = (*remote.Mounts)(nil)
)

// New returns the sources of a server adding tools to reg and logging to
// logger (nil discards). They serve nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Set {
	return &Set{
		http:    httpsource.NewSource(reg, logger),
		mcp:     mcpsource.New(reg, logger),
		remotes: remote.New(reg, logger),
	}
}

// Check implements Source: every source checks its part of cfg.
func (s *Set) Check(cfg Config) error {
	return errors.Join(s.http.Check(cfg.HTTPTools), s.mcp.Check(cfg.MCPServers), s.remotes.Check(cfg.Remotes))
}

// Sync implements Source: every source syncs its part of cfg, HTTP tools
// first, so at start their names are claimed before any server connects.
// One source's error does not stop the others.
func (s *Set) Sync(ctx context.Context, cfg Config) error {
	return errors.Join(s.http.Sync(ctx, cfg.HTTPTools), s.mcp.Sync(ctx, cfg.MCPServers), s.remotes.Sync(ctx, cfg.Remotes))
}

// Close implements Source.
func (s *Set) Close() error {
	return errors.Join(s.http.Close(), s.mcp.Close(), s.remotes.Close())
}
