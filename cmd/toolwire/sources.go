package main

import (
	"context"
	"errors"

	mcpsource "github.com/toolwire/toolwire/sources/mcp"
	"github.com/toolwire/toolwire/sources/remote"
)

// Sources is the part of the serve configuration that brings tools from
// outside the binary: MCP servers and remote toolwire servers. It is
// embedded in serveConfig, so its keys sit at the top level of the file.
type Sources struct {
	MCPServers []mcpsource.ServerConfig `json:"mcp_servers,omitempty"`
	Remotes    []remote.Config          `json:"remotes,omitempty"`
}

// validate checks every source, reading no files and no environment.
func (s Sources) validate() error {
	return errors.Join(mcpsource.ValidateAll(s.MCPServers), remote.ValidateAll(s.Remotes))
}

// empty reports whether no source is configured.
func (s Sources) empty() bool {
	return len(s.MCPServers) == 0 && len(s.Remotes) == 0
}

// sourceSet runs the MCP gateway and the remote mounts of one server.
type sourceSet struct {
	mcp     *mcpsource.Gateway
	remotes *remote.Mounts
}

// Apply reconciles the running sources with cfg: new ones start, removed
// ones stop and lose their tools, changed ones restart, unchanged ones are
// left alone. It does not block on connections. The whole cfg is
// validated first, so an invalid one changes nothing; config reload calls
// this at start and with each new file (see toolSources in reload.go).
func (s *sourceSet) Apply(ctx context.Context, cfg Sources) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	return errors.Join(s.mcp.Sync(ctx, cfg.MCPServers), s.remotes.Sync(ctx, cfg.Remotes))
}

// Close stops every source, ends MCP child processes and removes the
// sources' tools.
func (s *sourceSet) Close() {
	_ = s.mcp.Close()
	_ = s.remotes.Close()
}
