// Package mcpgw imports the tools of MCP servers into a toolwire registry and
// forwards calls to them, using the official MCP Go SDK.
//
// Each configured server's tools are offered as "<name>_<tool>" (OpenAI
// function names allow no dots). Schemas, descriptions, titles and
// annotations are kept, with MCP's defaults for absent hints. A call is
// forwarded with its context, so cancellation reaches the server; MCP
// progress notifications become progress reports; content blocks,
// structured content and isError map to the result.
//
// Servers connect in the background. One that is down is retried with
// exponential backoff, and its tools appear when it comes up; a server that
// announces tools/list_changed is re-listed; a stdio server that exits is
// restarted, and calls in flight get error results. Each change to a
// server's tools is one atomic registry update.
package mcpgw

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/toolwire/toolwire/tools"
)

// Gateway keeps the tools of a set of MCP servers in a registry.
type Gateway struct {
	reg *tools.Registry
	log *slog.Logger

	// Retry delays after a failed connection, doubling from minBackoff up to
	// maxBackoff. Tests shorten them.
	minBackoff, maxBackoff time.Duration
	// terminate is how long a stdio server may take to exit once its stdin
	// is closed before it is signalled.
	terminate time.Duration

	mu      sync.Mutex
	closed  bool
	servers map[string]*server
	dying   map[string]<-chan struct{} // stopped servers, done when their tools are gone
	wg      sync.WaitGroup             // one per server's run loop
}

// New returns a gateway adding tools to reg and logging to logger (nil
// discards). It connects to nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Gateway {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Gateway{
		reg: reg, log: logger,
		minBackoff: 500 * time.Millisecond, maxBackoff: 30 * time.Second,
		terminate: 2 * time.Second,
		servers:   map[string]*server{},
		dying:     map[string]<-chan struct{}{},
	}
}

// Sync makes the gateway serve exactly cfgs: it starts servers that are new,
// stops those no longer listed (removing their tools) and restarts those
// whose configuration changed. It returns at once; connections are made in
// the background, and live until Close or a later Sync: ctx only bounds
// the call itself. An invalid configuration is an error and changes nothing.
func (g *Gateway) Sync(ctx context.Context, cfgs []ServerConfig) error {
	if err := ValidateAll(cfgs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	want := make(map[string]ServerConfig, len(cfgs))
	for _, c := range cfgs {
		want[c.Name] = c
	}
	for name, s := range g.servers {
		if c, ok := want[name]; !ok || !c.equal(s.cfg) {
			g.dying[name] = s.stop()
			delete(g.servers, name)
		}
	}
	for name, c := range want {
		if _, ok := g.servers[name]; !ok {
			// A server replacing one of the same name waits until the old
			// one's tools are gone, so their names are free again.
			g.start(c, g.dying[name])
		}
	}
	for name, done := range g.dying {
		select {
		case <-done:
			delete(g.dying, name)
		default:
		}
	}
	return nil
}

// Close stops every server, closing sessions and ending child processes,
// removes their tools, and waits for all of it.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	for name, s := range g.servers {
		s.stop()
		delete(g.servers, name)
	}
	g.mu.Unlock()
	g.wg.Wait()
	return nil
}
