package main

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/toolwire/toolwire/service"
	"google.golang.org/grpc"
)

// serveHealth serves srv's health service alone, in plaintext, on addr, so
// that probes reach it when the tool service requires TLS or client
// certificates. stop ends it; serve calls stop only after draining, so
// probes see NOT_SERVING while the server drains.
func serveHealth(srv *service.Server, addr string, log *slog.Logger) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listener: %w", err)
	}
	gs := grpc.NewServer()
	srv.RegisterHealth(gs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	log.Info("health listening on "+lis.Addr().String(), "addr", lis.Addr().String())
	return func() { gs.Stop(); <-done }, nil
}
