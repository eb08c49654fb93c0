package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/toolwire/toolwire/internal/connlimit"
	"github.com/toolwire/toolwire/service/grpcserve"
)

// A listener is one of serve's ports, listening, with what serves on it.
// Every port has the one shape of exposure-notifications-server's
// pkg/server: Serve(ctx, lis) serves until ctx is done, drains, and
// returns nil, or returns the error that stopped it early.
type listener struct {
	name string // said before its errors ("HTTP port"); "" for the gRPC port's
	lis  net.Listener
	srv  interface {
		Serve(ctx context.Context, lis net.Listener) error
	}
	// late ports (health, admin) serve until the others have drained, so
	// probes see the drain and scrapes its metrics.
	late bool
}

// serve serves every listener until ctx is done, then reports how the
// engine's drain ended.
func (s *serveRun) serve(ctx context.Context, ls []listener) error {
	bound := shutdownBound(s.cfg)
	if n := nofile(); n > 0 {
		if w := fdWarning(s.cfg, n); w != "" {
			s.log.Warn(w, "nofile", n)
		}
	}
	s.log.Info("a shutdown takes at most "+bound.String()+": a pod's terminationGracePeriodSeconds must be longer, with its preStop delay", "shutdown_bound_seconds", int(math.Ceil(bound.Seconds())))
	stopLog := context.AfterFunc(ctx, func() { s.log.Info("shutting down: draining running batches") })
	defer stopLog()
	if err := s.serveAll(ctx, ls); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.log.Info("toolwire stopped", "abandoned_tools", s.eng.Stats().Abandoned)
	return nil
}

// serveAll serves the listeners under one errgroup until ctx is done: the
// gRPC and HTTP ports drain first, then the late ones stop. A port whose
// loop fails stops the others, and serveAll returns its error.
func (s *serveRun) serveAll(ctx context.Context, ls []listener) error {
	g, gctx := errgroup.WithContext(ctx)
	late, stopLate := context.WithCancel(context.WithoutCancel(gctx))
	defer stopLate()
	var front sync.WaitGroup
	for _, l := range ls {
		lctx := late
		if !l.late {
			lctx = gctx
			front.Add(1)
		}
		g.Go(func() error {
			if !l.late {
				defer front.Done()
			}
			err := l.srv.Serve(lctx, l.lis)
			if err != nil && l.name != "" {
				err = fmt.Errorf("%s: %w", l.name, err)
			}
			return err
		})
	}
	g.Go(func() error { front.Wait(); stopLate(); return nil })
	return g.Wait()
}

// grpcServer serves the gRPC surface with the security's options.
type grpcServer struct {
	srv  *grpcserve.Server
	opts []grpc.ServerOption
}

func (g grpcServer) Serve(ctx context.Context, lis net.Listener) error {
	return g.srv.Serve(ctx, lis, g.opts...)
}

// healthListener listens on health_listen, when set, for the gRPC health
// service alone, in plaintext, so that probes reach it when the tool
// service requires TLS or client certificates. It is late: probes see
// NOT_SERVING while the server drains.
func (s *serveRun) healthListener(srv *grpcserve.Server) (listener, error) {
	if s.cfg.Health == "" {
		return listener{}, nil
	}
	lis, err := listenTCP("health_listen", s.cfg.Health)
	if err != nil {
		return listener{}, err
	}
	s.log.Info("health listening on "+lis.Addr().String(), "addr", lis.Addr().String())
	// Unbounded, but saying when it cannot accept, as every other port.
	lis = connlimit.Listen(lis, 0, "", s.log)
	return listener{name: "health listener", lis: lis, srv: healthServer{srv}, late: true}, nil
}

// healthMaxMessageBytes bounds a request to the health listener: a
// health check names a service, and gRPC's default would have the
// listener read 4 MiB requests whole, without credentials.
const healthMaxMessageBytes = 4 << 10

// healthServer serves a gRPC server's health service alone.
type healthServer struct{ srv *grpcserve.Server }

func (h healthServer) Serve(ctx context.Context, lis net.Listener) error {
	gs := grpc.NewServer(grpc.MaxHeaderListSize(grpcserve.MaxHeaderBytes), grpc.MaxRecvMsgSize(healthMaxMessageBytes))
	h.srv.RegisterHealth(gs)
	stop := context.AfterFunc(ctx, gs.Stop)
	defer stop()
	// A stop that came before gs.Serve began makes it return
	// ErrServerStopped: the stop asked for, not a failure.
	if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// listenTCP listens on addr, the setting key's (and its flag's): an
// error names them, so that "address already in use" or "missing port in
// address" says which of serve's four addresses to change (the gRPC
// port's said only "listen tcp 127.0.0.1:50051: bind: address already in
// use").
func listenTCP(key, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s (--%s): %w", key, strings.ReplaceAll(key, "_", "-"), err)
	}
	return lis, nil
}
