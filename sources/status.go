package sources

import (
	"time"

	"github.com/toolwire/toolwire/sources/internal/supervise"
	"github.com/toolwire/toolwire/sources/openapi"
)

// The states of a source (Status.State).
const (
	StateUp       = supervise.StateUp       // connected, its tools offered
	StateDown     = supervise.StateDown     // not connected yet: its first connection is being made
	StateRetrying = supervise.StateRetrying // its connection failed or ended; it reconnects after a wait
	StateStatic   = "static"                // declared in the file (HTTP tools, OpenAPI documents): nothing to connect
)

// Status is where one declared source stands, as an operator's console
// shows it.
type Status struct {
	Kind  string    // its kind's key in the config file: "http_tools", "mcp_servers", …
	Name  string    // its name in that list
	Owner string    // the owner of its tools in the registry (tools.Registry.Owner): "http", "mcp:files", …
	State string    // StateUp, StateDown, StateRetrying or StateStatic
	Err   string    // why its last connection failed or ended; "" when none has
	Since time.Time // when State last changed (for a static source, the last Sync)
	// Skipped counts what it declares and could not offer: an OpenAPI
	// document's operations that gave no tool, each logged with its
	// reason when the document was loaded.
	Skipped int
}

// owners are the registry owner of each kind's entries, by the kind's key:
// HTTP tools share one owner, every other entry owns its tools.
var owners = map[string]func(name string) string{
	"http_tools":    func(string) string { return "http" },
	"openapi":       func(n string) string { return "openapi:" + n },
	"mcp_servers":   func(n string) string { return "mcp:" + n },
	"remotes":       func(n string) string { return "remote:" + n },
	"grpc_services": func(n string) string { return "grpc:" + n },
}

// Status reports every source the last Sync declared, in kinds' order and
// by name within a kind: the connection's state for sources that keep one
// (MCP servers, remotes, gRPC services), StateStatic for the others.
func (s *Set) Status() []Status {
	s.mu.Lock()
	cfg, at := s.synced, s.at
	s.mu.Unlock()
	var out []Status
	for _, src := range s.srcs {
		if st, ok := src.(interface {
			status(Config, time.Time) []Status
		}); ok {
			out = append(out, st.status(cfg, at)...)
		}
	}
	return out
}

// connections is a source that keeps connections, supervised.
type connections interface {
	Status() []supervise.Status
}

// status reports the entries of a's kind in cfg.
func (a adapter[C]) status(cfg Config, at time.Time) []Status {
	owner := owners[a.key]
	if owner == nil {
		owner = func(n string) string { return a.key + ":" + n }
	}
	if c, ok := a.src.(connections); ok {
		list := c.Status()
		out := make([]Status, len(list))
		for i, st := range list {
			out[i] = Status{Kind: a.key, Name: st.Name, Owner: owner(st.Name), State: st.State, Err: st.Err, Since: st.Since}
		}
		return out
	}
	var counts map[string]openapi.Counts
	if c, ok := a.src.(interface {
		Counts() map[string]openapi.Counts
	}); ok {
		counts = c.Counts()
	}
	var out []Status
	for _, c := range a.part(cfg) {
		n := a.name(c)
		out = append(out, Status{Kind: a.key, Name: n, Owner: owner(n), State: StateStatic, Since: at, Skipped: counts[n].Skipped})
	}
	return out
}
