package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Registry holds the tools a server offers. It is safe for concurrent use;
// readers take immutable snapshots, so a batch runs against the tools that
// existed when it started however the registry changes meanwhile.
type Registry struct {
	snap    atomic.Pointer[Snapshot] // read without locking on every batch
	mu      sync.Mutex               // serialises writers
	changed chan struct{}            // closed and replaced on every change
}

// NewRegistry returns a registry holding tools, or an error naming the first
// tool that is not valid.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{changed: make(chan struct{})}
	r.snap.Store(newSnapshot(nil))
	if err := r.Add(tools...); err != nil {
		return nil, err
	}
	return r, nil
}

// Snapshot returns the current set of tools.
func (r *Registry) Snapshot() *Snapshot {
	return r.snap.Load()
}

// Changed returns a channel that is closed at the next change of the set of
// tools. Take a new one after each change.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Add validates tools and adds them all, or none: a tool with an invalid name
// or schema, or a name already taken, is an error.
func (r *Registry) Add(tools ...Tool) error {
	return r.Update(nil, tools...)
}

// Remove removes the named tools; names not registered are ignored.
func (r *Registry) Remove(names ...string) {
	_ = r.Update(names)
}

// Update removes the named tools and adds tools in one atomic step, so
// readers see either the old set or the new one. On error nothing changes.
func (r *Registry) Update(remove []string, add ...Tool) error {
	prepared, err := prepareAll(add)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.commit(remove, prepared)
}

// Replace is Update for a source that owns some of the registry's tools
// (an MCP server's, a remote mount's): it swaps the tools named owned for
// list in one step, leaving out, rather than failing on, a tool whose name
// another source holds. It returns the names registered from list and the
// names left out. On error nothing changes.
func (r *Registry) Replace(owned []string, list ...Tool) (added, skipped []string, err error) {
	prepared, err := prepareAll(list)
	if err != nil {
		return nil, nil, err
	}
	mine := make(map[string]bool, len(owned))
	for _, n := range owned {
		mine[n] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	kept := prepared[:0]
	for _, t := range prepared {
		if _, taken := cur.byName[t.Name]; taken && !mine[t.Name] {
			skipped = append(skipped, t.Name)
			continue
		}
		kept = append(kept, t)
		added = append(added, t.Name)
	}
	if err := r.commit(owned, kept); err != nil {
		return nil, nil, err
	}
	return added, skipped, nil
}

func prepareAll(add []Tool) ([]*Tool, error) {
	prepared := make([]*Tool, 0, len(add))
	for i := range add {
		t, err := prepare(add[i])
		if err != nil {
			return nil, err
		}
		prepared = append(prepared, t)
	}
	return prepared, nil
}

// commit removes the named tools and adds prepared ones; r.mu is held.
func (r *Registry) commit(remove []string, prepared []*Tool) error {
	cur := r.snap.Load()
	byName := make(map[string]*Tool, len(cur.byName)+len(prepared))
	for name, t := range cur.byName {
		byName[name] = t
	}
	for _, name := range remove {
		delete(byName, name)
	}
	for _, t := range prepared {
		if _, dup := byName[t.Name]; dup {
			return fmt.Errorf("tool %q: already registered", t.Name)
		}
		byName[t.Name] = t
	}
	next := newSnapshot(byName)
	if next.revision == cur.revision {
		return nil
	}
	r.snap.Store(next)
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// prepare validates a tool and returns a copy with its schemas compiled.
func prepare(t Tool) (*Tool, error) {
	if !namePattern.MatchString(t.Name) {
		return nil, fmt.Errorf("tool %q: name must match [A-Za-z0-9_.-]{1,128}", t.Name)
	}
	if t.Handler == nil {
		return nil, fmt.Errorf("tool %q: no handler", t.Name)
	}
	if t.Timeout < 0 {
		return nil, fmt.Errorf("tool %q: negative timeout", t.Name)
	}
	if t.Source == 0 {
		t.Source = SourceBuiltin
	}
	if len(t.InputSchema) == 0 {
		t.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	var root struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(t.InputSchema, &root); err != nil {
		return nil, fmt.Errorf("tool %q: input schema is not a JSON object: %w", t.Name, err)
	}
	if root.Type != "object" {
		return nil, fmt.Errorf("tool %q: input schema must have root type \"object\"", t.Name)
	}
	var err error
	if t.input, err = compileSchema(t.InputSchema); err != nil {
		return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
	}
	t.inputFlat = compileFlat(t.InputSchema)
	if len(t.OutputSchema) > 0 {
		if t.output, err = compileSchema(t.OutputSchema); err != nil {
			return nil, fmt.Errorf("tool %q: output schema: %w", t.Name, err)
		}
		t.outputFlat = compileFlat(t.OutputSchema)
	}
	return &t, nil
}

// Snapshot is an immutable set of tools with its revision.
type Snapshot struct {
	byName   map[string]*Tool
	sorted   []*Tool
	names    []string
	revision string
}

func newSnapshot(byName map[string]*Tool) *Snapshot {
	s := &Snapshot{byName: byName}
	for name, t := range byName {
		s.sorted = append(s.sorted, t)
		s.names = append(s.names, name)
	}
	slices.SortFunc(s.sorted, func(a, b *Tool) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(s.names)
	s.revision = s.hash()
	return s
}

// hash derives the revision from the declarations, so replicas serving the
// same tools report the same revision and clients can cache across them.
func (s *Snapshot) hash() string {
	h := sha256.New()
	for _, t := range s.sorted {
		decl, _ := json.Marshal(struct {
			Name, Title, Description string
			In, Out                  json.RawMessage
			A                        Annotations
			Timeout                  int64
			Source                   Source
		}{t.Name, t.Title, t.Description, t.InputSchema, t.OutputSchema, t.Annotations, int64(t.Timeout), t.Source})
		h.Write(decl)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Revision identifies the set of tools; it differs whenever the set differs.
func (s *Snapshot) Revision() string { return s.revision }

// Lookup returns the named tool.
func (s *Snapshot) Lookup(name string) (*Tool, bool) {
	t, ok := s.byName[name]
	return t, ok
}

// Tools returns the tools sorted by name. The slice must not be modified.
func (s *Snapshot) Tools() []*Tool { return s.sorted }

// Names returns the tool names, sorted. The slice must not be modified.
func (s *Snapshot) Names() []string { return s.names }

// Len returns the number of tools.
func (s *Snapshot) Len() int { return len(s.sorted) }
