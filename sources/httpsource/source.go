package httpsource

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/toolwire/toolwire/tools"
)

// ID is the registry source id of the HTTP tools.
const ID = "http"

// Source serves the config file's http_tools in a registry.
type Source struct {
	reg    *tools.Registry
	log    *slog.Logger
	client *http.Client // shared by every generation of HTTP tools
}

// NewSource returns a source adding HTTP tools to reg and logging to logger
// (nil discards). It serves nothing until Sync.
func NewSource(reg *tools.Registry, logger *slog.Logger) *Source {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{reg: reg, log: logger, client: NewClient()}
}

// Check reports whether specs can be served, changing nothing: each must
// be valid, and no name may be served by another tool. The tools are
// written in the same file as the rest of the config, so a clash is a
// mistake to fix there, not a tool to hold back as the registry does for
// names a server lists (see tools.Registry).
func (s *Source) Check(_ context.Context, specs []Spec) error {
	ts, err := Tools(specs, s.client)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if owner, taken := s.reg.Owner(t.Name); taken && owner != ID {
			return fmt.Errorf("http_tools: tool %q: the name is taken by another tool (%s)", t.Name, owner)
		}
	}
	return nil
}

// Sync makes the HTTP tools exactly those specs declare, in one registry
// update. An invalid spec is an error and changes nothing. A name taken
// since Check is held back with a log line, as a server's would be.
func (s *Source) Sync(_ context.Context, specs []Spec) error {
	ts, err := Tools(specs, s.client)
	if err != nil {
		return err
	}
	skipped, err := s.reg.Source(ID).Set(ts...)
	for _, n := range skipped {
		owner, _ := s.reg.Owner(n)
		s.log.Error("skipping HTTP tool: the name is taken by another tool", "tool", n, "owner", owner)
	}
	return err
}

// Close removes the HTTP tools and closes idle connections.
func (s *Source) Close() error {
	_, err := s.reg.Source(ID).Set()
	s.client.CloseIdleConnections()
	return err
}
