// Package mcpsource imports the tools of MCP servers into a toolwire registry and
// forwards calls to them, using the official MCP Go SDK. It owns the
// mcp_servers part of the config (ServerConfig) and each server's tools in the
// registry, as the source "mcp:<name>"; it must not import service/ or cmd/.
//
// Each configured server's tools are offered as "<name>_<tool>" (OpenAI
// function names allow no dots). Schemas, descriptions, titles and
// annotations are kept, with MCP's defaults for absent hints. A call is
// forwarded with its context, so cancellation reaches the server; MCP
// progress notifications become progress reports, delivered in the order the
// server wrote them, before the result; content blocks, structured content
// and isError map to the result. A tool that requires MCP Tasks is called as
// a task (see tasks.go).
//
// A streamable HTTP server behind OAuth is signed in to with the client
// credentials grant, its token endpoint discovered as the MCP
// authorization specification says (see oauth.go). Every HTTP request
// follows redirects only within its origin, so no secret leaves the
// server it was configured for (see redirect.go); what a server sends is
// bounded before it is held: answers, and tool listings (see bounds.go).
// A stdio server runs as a process group of its own that does not outlive
// it (see process.go).
//
// Servers connect in the background. One that is down is retried with
// exponential backoff, and its tools appear when it comes up; a server that
// announces tools/list_changed is re-listed; a stdio server that exits is
// restarted, and calls in flight get error results at once; one that
// stops answering is found out by a ping once a call ends without its
// answer, and restarted too (see alive.go). A streamable
// HTTP stream the server ends or that breaks before the call's result is
// resumed as MCP says, and a server found gone while it is (refused, or
// silent for its reconnect_timeout) fails its calls at once (see
// resume.go). Each change to a server's tools
// is one atomic registry update; a tool whose name another tool holds is
// held back, with one log line, until that name is free (see tools.Registry). A server stopped by Sync (removed or
// reconfigured) offers no tools from then on, but its calls in flight
// finish on its old session, progress and all, before that session closes.
package mcpsource

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/supervise"
	"github.com/toolwire/toolwire/tools"
)

// Gateway keeps the tools of a set of MCP servers in a registry.
type Gateway struct {
	reg *tools.Registry
	log *slog.Logger
	// terminate is how long a stdio server may take to exit once its stdin
	// is closed before it is signalled.
	terminate time.Duration
	// listBounds bound each tools/list (see bounds.go).
	listBounds listing.Bounds

	// set runs a server per configuration; a stopped server's loop returns
	// once its tools are removed, handing its session to close.
	set *supervise.Set[ServerConfig]

	closing sync.WaitGroup // one per session being closed
	cancels sync.WaitGroup // tasks/cancel requests in flight
	checks  sync.WaitGroup // liveness checks of stdio servers (see alive.go)

	onTask  func(r *rpc, taskID string) // tests see the tasks calls create
	onCheck func(stage string, r *rpc)  // tests see the liveness checks' stages (see alive.go)
}

// New returns a gateway adding tools to reg and logging to logger (nil
// discards). It connects to nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Gateway {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{reg: reg, log: logger, terminate: 2 * time.Second, listBounds: listing.Default}
	g.set = supervise.New(supervise.Hooks[ServerConfig]{
		Name:     ServerConfig.name,
		Equal:    ServerConfig.equal,
		Validate: ValidateAll,
		Start:    g.newServer,
	})
	return g
}

// Sync makes the gateway serve exactly cfgs: it starts servers that are new,
// stops those no longer listed (removing their tools) and restarts those
// whose configuration changed. It returns at once; connections are made in
// the background, and live until Close or a later Sync: ctx only bounds
// the call itself. An invalid configuration is an error and changes nothing.
func (g *Gateway) Sync(ctx context.Context, cfgs []ServerConfig) error {
	return g.set.Sync(ctx, cfgs)
}

// Status reports each MCP server's connection: up, down or retrying.
func (g *Gateway) Status() []supervise.Status { return g.set.Status() }

// Check reports whether cfgs are a valid configuration, changing nothing.
func (g *Gateway) Check(_ context.Context, cfgs []ServerConfig) error { return ValidateAll(cfgs) }

// Close stops every server, closing sessions and ending child processes,
// removes their tools, and waits for all of it, calls in flight included.
func (g *Gateway) Close() error {
	g.set.Close()
	g.closing.Wait()
	g.cancels.Wait()
	g.checks.Wait()
	return nil
}

// close closes a session whose tools are gone once its calls in flight
// have finished (the SDK's own, and the gateway's on r), waits until it
// has ended, and calls cleanup. A
// session that was stopped (stopped is true) is closed in the background,
// so that a new session of the same name can start meanwhile.
func (g *Gateway) close(cs *mcp.ClientSession, r *rpc, ended <-chan struct{}, stopped bool, cleanup func()) {
	g.closing.Add(1)
	finish := func() {
		defer g.closing.Done()
		r.drain() // they end at once if the session has
		_ = cs.Close()
		<-ended
		cleanup()
	}
	if stopped {
		go finish()
	} else {
		finish()
	}
}
