// Package remote mounts the tools of other toolwire servers into a local
// registry, so an agent (or toolset) served behind one ToolService becomes
// tools of another.
//
// A mount's tools are offered as "<name>_<tool>", with the remote's schemas,
// annotations and timeouts, and kept fresh with WatchTools: every new remote
// revision is listed and swapped in with one registry update. A call is
// forwarded as a one-call ExecuteBatch with the caller's context (so
// cancellation travels) and its remaining time as the call's timeout; the
// remote's progress events become local ones, and its result passes through
// unchanged, error kind included. A remote that is down is retried with
// capped exponential backoff; its tools are removed while it is away.
package remote

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/toolwire/toolwire/tools"
)

// Mounts keeps the tools of a set of remote toolwire servers in a registry.
type Mounts struct {
	reg *tools.Registry
	log *slog.Logger

	// Retry delays after a failed connection, doubling from minBackoff up to
	// maxBackoff. Tests shorten them.
	minBackoff, maxBackoff time.Duration

	mu     sync.Mutex
	closed bool
	mounts map[string]*mount
	dying  map[string]<-chan struct{} // stopped mounts, done when their tools are gone
	wg     sync.WaitGroup             // one per mount's run loop
}

// New returns mounts adding tools to reg and logging to logger (nil
// discards). It connects to nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Mounts {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Mounts{
		reg: reg, log: logger,
		minBackoff: 500 * time.Millisecond, maxBackoff: 30 * time.Second,
		mounts: map[string]*mount{}, dying: map[string]<-chan struct{}{},
	}
}

// Sync makes the mounts exactly cfgs: it starts new ones, stops those no
// longer listed (removing their tools) and restarts those whose
// configuration changed. It returns at once; connections are made in the
// background, and live until Close or a later Sync: ctx only bounds the
// call itself. An invalid configuration is an error and changes nothing.
func (m *Mounts) Sync(ctx context.Context, cfgs []Config) error {
	if err := ValidateAll(cfgs); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	want := make(map[string]Config, len(cfgs))
	for _, c := range cfgs {
		want[c.Name] = c
	}
	for name, mt := range m.mounts {
		if c, ok := want[name]; !ok || c != mt.cfg {
			m.dying[name] = mt.stop()
			delete(m.mounts, name)
		}
	}
	for name, c := range want {
		if _, ok := m.mounts[name]; !ok {
			// A mount replacing one of the same name waits until the old
			// one's tools are gone, so their names are free again.
			m.start(c, m.dying[name])
		}
	}
	for name, done := range m.dying {
		select {
		case <-done:
			delete(m.dying, name)
		default:
		}
	}
	return nil
}

// Close stops every mount, removes its tools and waits for all of it.
func (m *Mounts) Close() error {
	m.mu.Lock()
	m.closed = true
	for name, mt := range m.mounts {
		mt.stop()
		delete(m.mounts, name)
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}
