package main

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/service/connectserve"
	"github.com/toolwire/toolwire/service/console"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/service/mcpserve"
	"github.com/toolwire/toolwire/service/serverstatus"
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

// httpPort listens on http_listen, when set, with the surfaces it serves
// on the engine: the ToolService over Connect, gRPC-Web and gRPC
// (connectserve, under /toolwire.v1.ToolService/, its telemetry on the
// gRPC surface's providers, svcCfg's), the read-only AdminService (view,
// under /toolwire.v1.AdminService/), and /mcp unless no_mcp, all behind
// the one Verifier's middleware; and the web console's page at /console/
// unless console is false (open: its RPCs are the ones authenticated). It
// refuses to listen beyond loopback with authentication off unless
// http_allow_unauthenticated (httpserve.Config.CheckExposure).
func (s *serveRun) httpPort(view *serverstatus.View, v *auth.Verifier, svcCfg ServiceConfig) (listener, error) {
	cfg := s.cfg
	if cfg.HTTPConfig.Listen == "" {
		return listener{}, nil
	}
	for _, check := range []func() error{cfg.HTTPConfig.Validate, cfg.MCPConfig.Validate} {
		if err := check(); err != nil {
			return listener{}, err
		}
	}
	// The gRPC port's certificate (reloaded as it is) and client
	// certificates, checked by the same Verifier.
	tlsConfig, err := cfg.SecurityConfig.TLS(v)
	if err != nil {
		return listener{}, fmt.Errorf("HTTP port: %w", err)
	}
	p := &httpPort{port: httpserve.New(cfg.HTTPConfig, tlsConfig, s.log)}
	if err := p.handle(s, view, v, connectserve.Options{TracerProvider: svcCfg.TracerProvider, MeterProvider: svcCfg.MeterProvider}); err != nil {
		return listener{}, fmt.Errorf("HTTP port: %w", err)
	}
	lis, err := listenTCP("http_listen", cfg.HTTPConfig.Listen)
	if err != nil {
		return listener{}, err
	}
	// Beyond loopback, a port anyone reaches needs callers, or the
	// operator's word that it needs none.
	if err := cfg.HTTPConfig.CheckExposure(lis.Addr(), v.Enabled()); err != nil {
		lis.Close()
		return listener{}, err
	}
	if !v.Enabled() && !isLoopback(lis.Addr().String()) {
		s.log.Warn("the HTTP port listens beyond loopback with authentication off (http_allow_unauthenticated): anyone who reaches it may call every tool", "addr", lis.Addr().String())
	}
	s.log.Info("toolwire HTTP port listening on "+lis.Addr().String(), "addr", lis.Addr().String(), "tls", tlsConfig != nil, "connect", connectserve.Path, "mcp", p.mcp != nil, "console", cfg.ConsoleConfig.Enabled())
	return listener{name: "HTTP port", lis: lis, srv: p}, nil
}

// httpPort is the HTTP port with the surfaces it serves.
type httpPort struct {
	port *httpserve.Server
	rpc  *connectserve.Server
	mcp  *mcpserve.Server // nil with no_mcp
}

// handle makes the surfaces and hands their handlers to the port.
func (p *httpPort) handle(s *serveRun, view *serverstatus.View, v *auth.Verifier, tel connectserve.Options) (err error) {
	authenticate := auth.RequireCredentials(v, s.log)
	if p.rpc, err = connectserve.New(s.eng, s.reg, tel); err != nil {
		return err
	}
	p.port.Handle(connectserve.Path, authenticate(p.rpc), nil)
	p.port.Handle(connectserve.AdminPath, authenticate(connectserve.NewAdmin(view)), nil)
	if s.cfg.ConsoleConfig.Enabled() {
		p.port.Handle(console.Path, console.Handler(), nil)
	}
	if meta := auth.ResourceMetadata(v); meta != nil {
		// Discovery for MCP clients: open, as it must be to be found.
		p.port.Handle(auth.ResourceMetadataPath, meta, nil)
		p.port.Handle(auth.ResourceMetadataPath+"/mcp", meta, nil)
	}
	if !s.cfg.MCPConfig.Off {
		if p.mcp, err = mcpserve.New(s.eng, s.reg, s.cfg.MCPConfig.Options(s.log, version())); err != nil {
			return err
		}
		s.onClose(p.mcp.Close) // closed by Shutdown once served
		p.port.Handle("/mcp", authenticate(p.mcp), mcpserve.Refuse)
	}
	return nil
}

// Serve serves the port until ctx is done; then the surfaces drain the
// engine (the MCP surface closes its sessions) while the port drains its
// requests. It returns once both are done.
func (p *httpPort) Serve(ctx context.Context, lis net.Listener) error {
	shutdown := sync.OnceFunc(func() {
		p.rpc.Shutdown()
		if p.mcp != nil {
			p.mcp.Shutdown()
		}
	})
	stop := context.AfterFunc(ctx, shutdown)
	defer stop()
	err := p.port.Serve(ctx, lis)
	shutdown() // at once when the port failed; else waits for the drain
	return err
}
