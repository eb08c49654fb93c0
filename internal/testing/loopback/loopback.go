// Package loopback serves a registry with the real toolwire server on a
// loopback TCP port for tests of tool sources end to end: ListTools,
// ExecuteBatch and WatchTools through a real listener and the Go client.
//
// It is for tests: no non-test package may import it.
package loopback

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
)

// Server is a toolwire server serving until Stop or the end of the test.
type Server struct {
	Addr    string
	Client  *client.Client    // a client of it, closed with it
	Service *grpcserve.Server // the server itself
	Engine  *engine.Engine    // the engine it runs on, for its counters

	stop sync.Once
	quit func() error
}

// Serve serves reg on a free loopback port; see ServeOn.
func Serve(tb testing.TB, reg *tools.Registry, cfg grpcserve.Config, opts ...grpc.ServerOption) *Server {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ServeOn(tb, lis, reg, cfg, opts...)
}

// ServeOn serves reg on lis with opts until Stop or the end of the test,
// on an engine of the defaults that logs nowhere, closed when it stops.
func ServeOn(tb testing.TB, lis net.Listener, reg *tools.Registry, cfg grpcserve.Config, opts ...grpc.ServerOption) *Server {
	tb.Helper()
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv, err := grpcserve.New(eng, reg, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, opts...) }()
	c, err := client.New(lis.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: lis.Addr().String(), Client: c, Service: srv, Engine: eng, quit: func() error {
		c.Close()
		cancel()
		err := <-served
		eng.Close()
		return err
	}}
	tb.Cleanup(s.Stop)
	return s
}

// Stop drains and stops the server and waits for it.
func (s *Server) Stop() {
	s.stop.Do(func() { _ = s.quit() })
}
