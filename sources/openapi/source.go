// Package openapi turns the operations of OpenAPI documents, as listed
// under openapi: in toolwire's config file, into tools: one per operation,
// named "<name>_<operationId>", whose input schema merges the operation's
// path, query and header parameters and its JSON request body, whose
// output schema is its 2xx JSON response's, and whose calls are HTTP
// requests made with sources/http's request layer (escaping, secrets from
// the environment at call time, bounded responses, cancellation). Each
// document's tools are the registry source "openapi:<name>".
//
// Documents are parsed with github.com/getkin/kin-openapi: OpenAPI 3.0 and
// 3.1 as they are, Swagger 2.0 converted to 3.0 (openapi2conv). It must
// not import engine/, service/, store/ or cmd/.
package openapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	httpsource "github.com/toolwire/toolwire/sources/http"
	"github.com/toolwire/toolwire/sources/internal/offer"
	"github.com/toolwire/toolwire/tools"
)

// Source serves the tools of the config file's openapi: entries.
type Source struct {
	reg    *tools.Registry
	log    *slog.Logger
	client *http.Client // calls and document fetches share it

	mu      sync.Mutex
	entries map[string]*offer.Tools // by entry name
	closed  bool
}

// New returns a source adding tools to reg and logging to logger (nil
// discards). It serves nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Source {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{reg: reg, log: logger, client: httpsource.NewClient(), entries: map[string]*offer.Tools{}}
}

// Load reads and parses c's document and returns the tools of the
// operations c selects, with a log line for each operation that gives no
// tool (logger nil discards). The error names the entry and the problem's
// place in the document.
func Load(ctx context.Context, c Config, client *http.Client, logger *slog.Logger) ([]tools.Tool, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		client = httpsource.NewClient()
	}
	fail := func(err error) ([]tools.Tool, error) {
		return nil, fmt.Errorf("openapi %q: spec %s: %w", c.Name, c.Spec, err)
	}
	data, err := read(ctx, client, c.Spec)
	if err != nil {
		return fail(err)
	}
	doc, err := parse(data)
	if err != nil {
		return fail(err)
	}
	hdrs, err := httpsource.ParseHeaders(c.Headers)
	if err != nil {
		return fail(err)
	}
	send := &httpsource.Sender{Client: client, Headers: hdrs}
	ts, skips, err := build(c, doc, send)
	if err != nil {
		return fail(err)
	}
	if logger != nil {
		for _, s := range skips {
			logger.Warn("skipping OpenAPI operation", "openapi", c.Name, "operation", s.route, "reason", s.reason)
		}
	}
	return ts, nil
}

// Check reports whether cfgs can be served, changing nothing: each entry
// is valid and its document loads.
func (s *Source) Check(cfgs []Config) error {
	if err := ValidateAll(cfgs); err != nil {
		return err
	}
	errs := make([]error, len(cfgs))
	for i, c := range cfgs {
		_, errs[i] = Load(context.Background(), c, s.client, nil)
	}
	return errors.Join(errs...)
}

// Sync serves the tools of cfgs' documents, each entry's in one registry
// update. An entry whose document does not load keeps the tools it had
// (the error says why); entries no longer listed lose theirs. A tool whose
// name another tool holds is held back with a log line (see offer).
func (s *Source) Sync(ctx context.Context, cfgs []Config) error {
	if err := ValidateAll(cfgs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	var errs []error
	want := map[string]bool{}
	for _, c := range cfgs {
		want[c.Name] = true
		ts, err := Load(ctx, c, s.client, s.log)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o := s.entries[c.Name]
		if o == nil {
			o = offer.New(s.reg, "openapi:"+c.Name, "OpenAPI", "the OpenAPI document's")
			s.entries[c.Name] = o
		}
		o.Set(ts, s.log.With("openapi", c.Name))
	}
	for name, o := range s.entries {
		if !want[name] {
			o.Set(nil, s.log.With("openapi", name))
			delete(s.entries, name)
		}
	}
	return errors.Join(errs...)
}

// Close removes every entry's tools and closes idle connections.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for name, o := range s.entries {
		o.Set(nil, s.log.With("openapi", name))
		delete(s.entries, name)
	}
	s.client.CloseIdleConnections()
	return nil
}
