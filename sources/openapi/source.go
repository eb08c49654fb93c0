// Package openapi turns the operations of OpenAPI documents, as listed
// under openapi: in toolwire's config file, into tools: one per operation,
// named "<name>_<operationId>", whose input schema merges the operation's
// path, query and header parameters and its request body (JSON or a
// form), whose output schema is its 2xx JSON response's, and whose calls
// are HTTP requests made with sources/httpsource's request layer (escaping,
// secrets from the environment at call time, bounded responses,
// cancellation). Each document's tools are the registry source
// "openapi:<name>".
//
// A document is read as JSON (or YAML) into a plain tree, once per
// change: OpenAPI 3.0 and 3.1, and Swagger 2.0 as it is written. Each
// operation is checked as its tool is made, so one that cannot be a
// correct tool is skipped with a log line and the others load; only a
// document that cannot be read at all is refused. What a load made is
// kept by the document's content and the entry's config, so a reload
// that changes neither rebuilds nothing. It must not import engine/,
// service/, store/ or cmd/.
package openapi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/internal/redact"
	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/offer"
	"github.com/toolwire/toolwire/tools"
)

// Source serves the tools of the config file's openapi: entries.
type Source struct {
	reg    *tools.Registry
	log    *slog.Logger
	client *http.Client // calls and document fetches share it

	mu      sync.Mutex // serialises Sync and Close; guards entries and closed
	entries map[string]*entry
	closed  bool

	checkedMu sync.Mutex
	checked   map[string]*loaded // by entry name: the last load Check made, for Sync to serve

	loads     atomic.Int64  // documents parsed, for tests
	slowAfter time.Duration // when a document still being read from a URL is logged (slowFetch; tests set it)
}

// entry is one openapi: entry being served.
type entry struct {
	offer  *offer.Tools
	served *loaded
}

// loaded is one load of an entry: what it made, and the key of what it
// was made from (the document's bytes and the entry's config).
type loaded struct {
	key   [32]byte
	cfg   string // the entry's config, as JSON
	tools []tools.Tool
	rep   *report
}

// of reports whether l was loaded for the entry c.
func (l *loaded) of(c Config) bool {
	b, _ := json.Marshal(c)
	return string(b) == l.cfg
}

// New returns a source adding tools to reg and logging to logger (nil
// discards). It serves nothing until Sync.
func New(reg *tools.Registry, logger *slog.Logger) *Source {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{reg: reg, log: logger, client: httpsource.NewClient(), entries: map[string]*entry{}, checked: map[string]*loaded{}, slowAfter: slowFetch}
}

// Load reads and parses c's document and returns the tools of the
// operations c selects, with a log line for each operation that gives no
// tool and one that sums the document up (logger nil discards). The
// error names the entry and the problem: a document that cannot be read
// or parsed, or an entry whose settings do not fit its document.
func Load(ctx context.Context, c Config, client *http.Client, logger *slog.Logger) ([]tools.Tool, error) {
	if client == nil {
		client = httpsource.NewClient()
	}
	data, err := fetch(ctx, c, client)
	if err != nil {
		return nil, err
	}
	l, err := load(c, data, client)
	if err != nil {
		return nil, err
	}
	if logger != nil {
		l.log(logger, c.Name)
	}
	return l.tools, nil
}

// fetch validates c and reads its document.
func fetch(ctx context.Context, c Config, client *http.Client) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	data, err := read(ctx, client, c.Spec)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("openapi %q: spec %s: %w", c.Name, c.Spec, err), c.Spec)
	}
	return data, nil
}

// key identifies what a load of c's document data makes.
func key(c Config, data []byte) [32]byte {
	cfg, _ := json.Marshal(c)
	h := sha256.New()
	h.Write(cfg)
	h.Write([]byte{0})
	h.Write(data)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// load parses data, c's document, and makes its tools.
func load(c Config, data []byte, client *http.Client) (*loaded, error) {
	fail := func(err error) (*loaded, error) {
		return nil, redact.Error(fmt.Errorf("openapi %q: spec %s: %w", c.Name, c.Spec, err), c.Spec)
	}
	d, err := parse(data)
	if err != nil {
		return fail(err)
	}
	hdrs, err := httpsource.ParseHeaders(c.Headers)
	if err != nil {
		return fail(err)
	}
	ts, rep, err := build(c, d, &httpsource.Sender{Client: client, Headers: hdrs}, listing.Default)
	if err != nil {
		return fail(err)
	}
	cfg, _ := json.Marshal(c)
	return &loaded{key: key(c, data), cfg: string(cfg), tools: ts, rep: rep}, nil
}

// log writes a line for each operation that gave no tool and one that
// sums the document up: how many operations became tools, and why the
// others did not.
func (l *loaded) log(logger *slog.Logger, name string) {
	for _, u := range l.rep.unmatched {
		list, pattern, _ := strings.Cut(u, " ")
		logger.Warn("OpenAPI "+list+" pattern matches no operation of the document", "openapi", name, "pattern", pattern)
	}
	byReason := map[string]int{}
	for _, s := range l.rep.skips {
		logger.Warn("skipping OpenAPI operation", "openapi", name, "operation", s.route, "reason", s.detail)
		byReason[s.reason]++
	}
	for _, s := range l.rep.leftOut {
		logger.Warn("leaving out an optional OpenAPI parameter", "openapi", name, "operation", s.route, "reason", s.detail)
	}
	if l.rep.cut != nil {
		logger.Error("OpenAPI document's operations cut short; offering the tools made before the cut", "openapi", name, "error", l.rep.cut, "tools", l.rep.tools, "cut", l.rep.cutOff)
	}
	attrs := []any{"openapi", name, "operations", l.rep.operations, "tools", l.rep.tools,
		"excluded", l.rep.excluded, "skipped", len(l.rep.skips)}
	if len(l.rep.leftOut) > 0 {
		attrs = append(attrs, "parameters_left_out", len(l.rep.leftOut))
	}
	if len(byReason) > 0 {
		var reasons []any
		for _, r := range slices.Sorted(maps.Keys(byReason)) {
			reasons = append(reasons, slog.Int(r, byReason[r]))
		}
		attrs = append(attrs, slog.Group("skipped_because", reasons...))
	}
	logger.Info("OpenAPI document loaded", attrs...)
}

// Check reports whether cfgs can be served, changing nothing: each entry
// is valid and its document loads. What it loaded is kept for Sync, which
// serves it without reading the document again: a reload parses each
// document once, and one whose document and entry did not change (a key
// of both says so) parses nothing.
func (s *Source) Check(ctx context.Context, cfgs []Config) error {
	if err := ValidateAll(cfgs); err != nil {
		return err
	}
	var errs []error
	for _, c := range cfgs {
		l, err := s.check(ctx, c)
		s.checkedMu.Lock()
		if err != nil {
			delete(s.checked, c.Name)
			errs = append(errs, err)
		} else {
			s.checked[c.Name] = l
		}
		s.checkedMu.Unlock()
	}
	return errors.Join(errs...)
}

// check loads c's document, or finds the load of its content served or
// checked already.
func (s *Source) check(ctx context.Context, c Config) (*loaded, error) {
	// A document read from a URL may take up to fetchTimeout, and serve's
	// start or a reload waits for it saying nothing: say so once it is
	// slow.
	var slow *time.Timer
	if isURL(c.Spec) {
		start := time.Now()
		slow = time.AfterFunc(s.slowAfter, func() {
			s.log.Warn("still reading an OpenAPI document", "openapi", c.Name, "spec", redact.URL(c.Spec),
				"waited", time.Since(start).Round(time.Second).String(), "gives_up_after", fetchTimeout.String())
		})
	}
	data, err := fetch(ctx, c, s.client)
	if slow != nil {
		slow.Stop()
	}
	if err != nil {
		return nil, err
	}
	k := key(c, data)
	var served *loaded
	s.mu.Lock()
	if e := s.entries[c.Name]; e != nil {
		served = e.served
	}
	s.mu.Unlock()
	if served != nil && served.key == k {
		return served, nil
	}
	s.checkedMu.Lock()
	l := s.checked[c.Name]
	s.checkedMu.Unlock()
	if l != nil && l.key == k {
		return l, nil
	}
	s.loads.Add(1)
	return load(c, data, s.client)
}

// Sync serves the tools of cfgs' documents, each entry's in one registry
// update: what Check loaded for the entry, or else its document read
// again. An entry that serves that already is left as it is; one whose
// document does not load keeps the tools it had (the error says why);
// entries no longer listed lose theirs. A tool whose name another tool
// holds is held back with a log line (see offer).
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
		s.checkedMu.Lock()
		l := s.checked[c.Name]
		delete(s.checked, c.Name)
		s.checkedMu.Unlock()
		if l == nil || !l.of(c) {
			data, err := fetch(ctx, c, s.client)
			if err == nil {
				s.loads.Add(1)
				l, err = load(c, data, s.client)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		e := s.entries[c.Name]
		if e != nil && e.served != nil && e.served.key == l.key {
			continue
		}
		l.log(s.log, c.Name)
		if e == nil {
			e = &entry{offer: offer.New(s.reg, "openapi:"+c.Name, "OpenAPI", "the OpenAPI document's")}
			s.entries[c.Name] = e
		}
		e.offer.Set(l.tools, s.log.With("openapi", c.Name))
		e.served = l
	}
	for name, e := range s.entries {
		if !want[name] {
			e.offer.Set(nil, s.log.With("openapi", name))
			delete(s.entries, name)
		}
	}
	return errors.Join(errs...)
}

// Counts are what one entry's document gave when it was last served.
type Counts struct {
	Operations int // in the document
	Excluded   int // left out by include and exclude
	Tools      int // made into tools
	Skipped    int // that could not be tools, each logged with its reason
}

// Counts reports, by entry name, what each entry served gave.
func (s *Source) Counts() map[string]Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Counts, len(s.entries))
	for name, e := range s.entries {
		if r := e.served.rep; r != nil {
			out[name] = Counts{Operations: r.operations, Excluded: r.excluded, Tools: r.tools, Skipped: len(r.skips)}
		}
	}
	return out
}

// Close removes every entry's tools and closes idle connections.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for name, e := range s.entries {
		e.offer.Set(nil, s.log.With("openapi", name))
		delete(s.entries, name)
	}
	s.checkedMu.Lock()
	clear(s.checked)
	s.checkedMu.Unlock()
	s.client.CloseIdleConnections()
	return nil
}
