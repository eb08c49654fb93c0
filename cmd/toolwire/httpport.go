package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/connectserve"
	"github.com/toolwire/toolwire/console"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/httpserve"
	"github.com/toolwire/toolwire/mcpserve"
	"github.com/toolwire/toolwire/serverstatus"
	"github.com/toolwire/toolwire/tools"
)

// HTTPConfig is httpserve.Config under a name of its own, so that it can
// be embedded beside the other features' Configs.
type HTTPConfig = httpserve.Config

// MCPConfig is mcpserve.Config under a name of its own, for the same
// reason.
type MCPConfig = mcpserve.Config

// ConsoleConfig is console.Config under a name of its own, for the same
// reason.
type ConsoleConfig = console.Config

// serveHTTPPort starts the HTTP port, when http_listen is set, with the
// surfaces it serves on eng: the ToolService over Connect, gRPC-Web and
// gRPC (connectserve, under /toolwire.v1.ToolService/, its telemetry on
// the gRPC surface's providers, tel), the read-only AdminService (view,
// under /toolwire.v1.AdminService/), and /mcp unless no_mcp, all behind
// the one Verifier's middleware; and the web console's page at /console/
// unless console is false (open: its RPCs are the ones authenticated). It listens before it returns, so a
// port in use fails serve at once. The port serves until ctx is done, then
// the surfaces drain the engine (the MCP surface closes its sessions)
// while the port drains its requests; wait returns once both are done. It
// refuses to listen beyond loopback with authentication off unless
// http_allow_unauthenticated (httpserve.Config.CheckExposure). A
// serving loop that fails cancels ctx through stop, so gRPC stops too.
func serveHTTPPort(ctx context.Context, stop context.CancelCauseFunc, cfg serveConfig, eng *engine.Engine, reg *tools.Registry, view *serverstatus.View, v *auth.Verifier, tel connectserve.Options, log *slog.Logger) (wait func() error, err error) {
	if cfg.HTTPConfig.Listen == "" {
		return func() error { return nil }, nil
	}
	if err := cfg.HTTPConfig.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.MCPConfig.Validate(); err != nil {
		return nil, err
	}
	// The gRPC port's certificate (reloaded as it is) and client
	// certificates, checked by the same Verifier.
	tlsConfig, err := cfg.SecurityConfig.TLS(v)
	if err != nil {
		return nil, fmt.Errorf("HTTP port: %w", err)
	}
	port := httpserve.New(cfg.HTTPConfig, tlsConfig, log)
	authenticate := auth.RequireCredentials(v, log)
	rpc, err := connectserve.New(eng, reg, &tel)
	if err != nil {
		return nil, fmt.Errorf("HTTP port: %w", err)
	}
	port.Handle(connectserve.Path, authenticate(rpc), nil)
	port.Handle(connectserve.AdminPath, authenticate(connectserve.NewAdmin(view)), nil)
	if cfg.ConsoleConfig.Enabled() {
		port.Handle(console.Path, console.Handler(), nil)
	}
	if meta := auth.ResourceMetadata(v); meta != nil {
		// Discovery for MCP clients: open, as it must be to be found.
		port.Handle(auth.ResourceMetadataPath, meta, nil)
		port.Handle(auth.ResourceMetadataPath+"/mcp", meta, nil)
	}
	var surface *mcpserve.Server
	if !cfg.MCPConfig.Off {
		surface = mcpserve.New(eng, reg, cfg.MCPConfig.Options(log, version()))
		port.Handle("/mcp", authenticate(surface), mcpserve.Refuse)
	}
	lis, err := net.Listen("tcp", cfg.HTTPConfig.Listen)
	if err != nil {
		err = fmt.Errorf("http_listen: %w", err)
	} else if err = cfg.HTTPConfig.CheckExposure(lis.Addr(), v.Enabled()); err != nil {
		// Beyond loopback, a port anyone reaches needs callers, or the
		// operator's word that it needs none.
		lis.Close()
	}
	if err != nil {
		if surface != nil {
			surface.Close()
		}
		return nil, err
	}
	if !v.Enabled() && !isLoopback(lis.Addr().String()) {
		log.Warn("the HTTP port listens beyond loopback with authentication off (http_allow_unauthenticated): anyone who reaches it may call every tool", "addr", lis.Addr().String())
	}
	log.Info("toolwire HTTP port listening on "+lis.Addr().String(), "addr", lis.Addr().String(), "tls", tlsConfig != nil, "connect", connectserve.Path, "mcp", surface != nil, "console", cfg.ConsoleConfig.Enabled())
	served := make(chan error, 1)
	go func() {
		err := port.Serve(ctx, lis)
		if err != nil {
			stop(fmt.Errorf("HTTP port: %w", err))
		}
		served <- err
	}()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
		rpc.Shutdown()
		if surface != nil {
			surface.Shutdown()
		}
	}()
	return func() error {
		<-drained
		return <-served
	}, nil
}
