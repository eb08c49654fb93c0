// Package remote mounts the tools of other toolwire servers into a local
// registry, so an agent (or toolset) served behind one ToolService becomes
// tools of another. It owns the remotes part of the config (Config) and each
// mount's tools in the registry, as the source "remote:<name>"; it must not
// import service/ or cmd/ (it reaches other servers through client/).
//
// A mount's tools are offered as "<name>_<tool>", with the remote's schemas,
// annotations and timeouts, and kept fresh with WatchTools: every new remote
// revision is listed and swapped in with one registry update. A call is
// forwarded as a one-call ExecuteBatch with the caller's context (so
// cancellation travels) and its remaining time as the call's timeout; the
// remote's progress events become local ones, and its result passes through
// unchanged, error kind included. A remote that is down is retried with
// capped exponential backoff; its tools are removed while it is away. A
// mount a reload removes or changes offers no tools from then on, but its
// calls in flight finish on its old connection (sources/internal/inflight),
// which closes once they have.
package remote

import (
	"context"
	"log/slog"
	"sync"

	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/supervise"
	"github.com/toolwire/toolwire/tools"
)

// Mounts keeps the tools of a set of remote toolwire servers in a registry.
type Mounts struct {
	reg    *tools.Registry
	log    *slog.Logger
	bounds listing.Bounds // of each listing; listing.Default unless a test lowers them

	// set runs a mount per configuration; a stopped mount's loop returns
	// once its tools are removed.
	set *supervise.Set[Config]

	closing sync.WaitGroup // one per connection retired with calls in flight
}

// New returns mounts adding tools to reg and logging to logger (nil
// discards). It connects to nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Mounts {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Mounts{reg: reg, log: logger, bounds: listing.Default}
	m.set = supervise.New(supervise.Hooks[Config]{
		Name:     Config.name,
		Equal:    func(a, b Config) bool { return a == b },
		Validate: ValidateAll,
		Start:    m.newMount,
	})
	return m
}

// Sync makes the mounts exactly cfgs: it starts new ones, stops those no
// longer listed (removing their tools) and restarts those whose
// configuration changed. It returns at once; connections are made in the
// background, and live until Close or a later Sync: ctx only bounds the
// call itself. An invalid configuration is an error and changes nothing.
func (m *Mounts) Sync(ctx context.Context, cfgs []Config) error {
	return m.set.Sync(ctx, cfgs)
}

// Status reports each remote's connection: up, down or retrying.
func (m *Mounts) Status() []supervise.Status { return m.set.Status() }

// Check reports whether cfgs are a valid configuration, changing nothing.
func (m *Mounts) Check(_ context.Context, cfgs []Config) error { return ValidateAll(cfgs) }

// Close stops every mount, removes its tools and waits for all of it,
// calls in flight included.
func (m *Mounts) Close() error {
	m.set.Close()
	m.closing.Wait()
	return nil
}
