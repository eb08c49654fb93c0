// Package sources owns the tools that come from outside the binary and are
// declared in the config file: HTTP APIs (sources/httpsource), MCP servers
// (sources/mcpsource), other toolwire servers (sources/remote), OpenAPI
// documents (sources/openapi) and gRPC services by reflection
// (sources/grpcsource). Each is a
// Source of its part of Config; Set is all of them, the Source of the
// whole Config that sources/reload keeps in step with the file. A source
// owns its tools in the registry as tools.Registry.Source(id), which also
// settles names two sources offer (docs/sources.md, "Names").
//
// A new kind of source is a package here with its config type and a
// Source of it, its key as a field of Config, and one line in kinds.
//
// sources and its packages must not import engine/, service/, store/ or
// cmd/: they reach the server only through the registry
// (docs/architecture.md).
package sources

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	grpcsource "github.com/toolwire/toolwire/sources/grpcsource"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"github.com/toolwire/toolwire/sources/openapi"
	"github.com/toolwire/toolwire/sources/remote"
	"github.com/toolwire/toolwire/tools"
)

// Source is one kind of tool source, configured by C: its part of the
// config file.
type Source[C any] interface {
	// Check reports whether cfg can be applied, changing nothing. Reload
	// checks every source before it syncs any, so an invalid file changes
	// nothing. ctx bounds what checking reads (an OpenAPI document
	// fetched over HTTP): a reload's ends when serve stops.
	Check(ctx context.Context, cfg C) error
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
// level of the file. Each field is the list of one kind in kinds.
type Config struct {
	HTTPTools  []httpsource.Spec        `json:"http_tools"` // declarative HTTP tools
	OpenAPI    []openapi.Config         `json:"openapi,omitempty"`
	MCPServers []mcpsource.ServerConfig `json:"mcp_servers,omitempty"`
	Remotes    []remote.Config          `json:"remotes,omitempty"`
	GRPC       []grpcsource.Config      `json:"grpc_services,omitempty"`
}

// kinds is every kind of source, by its key in the config file, in the
// order Set syncs them: those the file itself declares (HTTP tools, then
// OpenAPI documents) first, so at start their names are claimed before
// any server connects. TestKinds checks that every field of
// Config has its line here.
var kinds = []kind{
	kindOf("http_tools", func(c Config) []httpsource.Spec { return c.HTTPTools }, httpsource.NewSource, func(s httpsource.Spec) string { return s.Name }),
	kindOf("openapi", func(c Config) []openapi.Config { return c.OpenAPI }, openapi.New, func(s openapi.Config) string { return s.Name }),
	kindOf("mcp_servers", func(c Config) []mcpsource.ServerConfig { return c.MCPServers }, mcpsource.New, func(s mcpsource.ServerConfig) string { return s.Name }),
	kindOf("remotes", func(c Config) []remote.Config { return c.Remotes }, remote.New, func(s remote.Config) string { return s.Name }),
	kindOf("grpc_services", func(c Config) []grpcsource.Config { return c.GRPC }, grpcsource.New, func(s grpcsource.Config) string { return s.Name }),
}

// kind is one kind of source with its configuration type erased, so that
// kinds of different types sit in one list.
type kind struct {
	key   string                                                     // its key in the config file
	len   func(Config) int                                           // how many it declares
	names func(Config) []string                                      // their names, for a log line
	files func(Config) []string                                      // local files they read (Filer)
	start func(reg *tools.Registry, log *slog.Logger) Source[Config] // the source, over the whole Config
}

// kindOf is the kind of S, a Source of []C configured by part of Config:
// new makes one, and name names each entry.
func kindOf[C any, S Source[[]C]](key string, part func(Config) []C, new func(*tools.Registry, *slog.Logger) S, name func(C) string) kind {
	return kind{
		key: key,
		len: func(cfg Config) int { return len(part(cfg)) },
		names: func(cfg Config) []string {
			list := part(cfg)
			out := make([]string, len(list))
			for i, c := range list {
				out[i] = name(c)
			}
			return out
		},
		files: func(cfg Config) []string {
			var out []string
			for _, c := range part(cfg) {
				if f, ok := any(c).(Filer); ok {
					out = append(out, f.Files()...)
				}
			}
			return out
		},
		start: func(reg *tools.Registry, log *slog.Logger) Source[Config] {
			return adapter[C]{src: new(reg, log), part: part, key: key, name: name}
		},
	}
}

// adapter is a Source of []C as a Source of the whole Config.
type adapter[C any] struct {
	src  Source[[]C]
	part func(Config) []C
	key  string         // the kind's key, for Status
	name func(C) string // names an entry, for Status
}

func (a adapter[C]) Check(ctx context.Context, cfg Config) error {
	return a.src.Check(ctx, a.part(cfg))
}
func (a adapter[C]) Sync(ctx context.Context, cfg Config) error { return a.src.Sync(ctx, a.part(cfg)) }
func (a adapter[C]) Close() error                               { return a.src.Close() }

// Filer is a source configuration that reads local files besides the
// config file (an OpenAPI document): reload watches them too, and
// re-applies the config when one changes.
type Filer interface {
	Files() []string
}

// Files are the local files cfg's sources read, as written.
func (cfg Config) Files() []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.files(cfg)...)
	}
	return out
}

// Empty reports whether cfg declares no source.
func (cfg Config) Empty() bool {
	for _, k := range kinds {
		if k.len(cfg) > 0 {
			return false
		}
	}
	return true
}

// LogAttrs are the names of what cfg declares, per key, for a log line:
// [] rather than null when there are none.
func (cfg Config) LogAttrs() []any {
	out := make([]any, 0, 2*len(kinds))
	for _, k := range kinds {
		out = append(out, k.key, k.names(cfg))
	}
	return out
}

// Set is every source of one server: one per kind, in kinds' order.
type Set struct {
	srcs []Source[Config]

	mu     sync.Mutex
	synced Config    // the configuration last synced, for Status
	at     time.Time // when
}

var _ Source[Config] = (*Set)(nil)

// New returns the sources of a server adding tools to reg and logging to
// logger (nil discards). They serve nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Set {
	s := &Set{srcs: make([]Source[Config], len(kinds))}
	for i, k := range kinds {
		s.srcs[i] = k.start(reg, logger)
	}
	return s
}

// Check implements Source: every source checks its part of cfg.
func (s *Set) Check(ctx context.Context, cfg Config) error {
	errs := make([]error, len(s.srcs))
	for i, src := range s.srcs {
		errs[i] = src.Check(ctx, cfg)
	}
	return errors.Join(errs...)
}

// Sync implements Source: every source syncs its part of cfg, in kinds'
// order. One source's error does not stop the others.
func (s *Set) Sync(ctx context.Context, cfg Config) error {
	errs := make([]error, len(s.srcs))
	for i, src := range s.srcs {
		errs[i] = src.Sync(ctx, cfg)
	}
	s.mu.Lock()
	s.synced, s.at = cfg, time.Now()
	s.mu.Unlock()
	return errors.Join(errs...)
}

// Close implements Source.
func (s *Set) Close() error {
	errs := make([]error, len(s.srcs))
	for i, src := range s.srcs {
		errs[i] = src.Close()
	}
	return errors.Join(errs...)
}
