// Package loopback serves a registry with the real toolwire server on a
// loopback TCP port for tests of tool sources end to end: ListTools,
// ExecuteBatch and WatchTools through a real listener and the Go client.
package loopback

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/service"
	"github.com/toolwire/toolwire/tools"
)

// Serve serves reg on 127.0.0.1 until the test ends and returns the address
// and a client of it. cfg.Logger defaults to discarding.
func Serve(tb testing.TB, reg *tools.Registry, cfg service.Config) (string, *client.Client) {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := service.New(reg, cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	c, err := client.New(lis.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-served; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String(), c
}
