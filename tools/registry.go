package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Registry holds the tools a server offers. It is safe for concurrent use;
// readers take immutable snapshots, so a batch runs against the tools that
// existed when it started however the registry changes meanwhile.
//
// Tools come from two kinds of owner: the built-in tools, added with Add
// and Update, and tool sources (HTTP tools, MCP servers, remote mounts),
// each of which replaces its own tools with Source(id).Set. One rule
// settles a name two owners offer: a built-in keeps its name; between
// sources, the first to offer a name keeps it, and a later source's tool of
// that name is not served (Set reports it once) until the owner drops the
// name, when the next source in line gets it in the same update.
type Registry struct {
	snap    atomic.Pointer[Snapshot] // read without locking on every batch
	mu      sync.Mutex               // serialises writers; guards the fields below
	changed chan struct{}            // closed and replaced on every change

	builtin map[string]*Tool    // tools added with Add and Update
	offers  map[string]*offer   // by source id: what each source offers
	claims  map[string][]string // by tool name: the source ids offering it, first come first
}

// offer is what one source offers.
type offer struct {
	tools   map[string]*Tool
	skipped map[string]bool // names not served at the last Set, reported then
}

// NewRegistry returns a registry holding tools, or an error naming the first
// tool that is not valid.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{
		changed: make(chan struct{}),
		builtin: map[string]*Tool{}, offers: map[string]*offer{}, claims: map[string][]string{},
	}
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

// Add validates built-in tools and adds them all, or none: a tool with an
// invalid name or schema, or a name already served, is an error.
func (r *Registry) Add(tools ...Tool) error {
	return r.Update(nil, tools...)
}

// Remove removes the named built-in tools; other names are ignored.
func (r *Registry) Remove(names ...string) {
	_ = r.Update(names)
}

// Update removes the named built-in tools and adds tools in one atomic
// step, so readers see either the old set or the new one. A name already
// served (by a built-in or a source) is an error. On error nothing changes.
func (r *Registry) Update(remove []string, add ...Tool) error {
	prepared, err := prepareAll(add)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	builtin := maps.Clone(r.builtin)
	for _, name := range remove {
		delete(builtin, name)
	}
	served := r.snap.Load().byName
	for _, t := range prepared {
		if _, dup := builtin[t.Name]; dup {
			return fmt.Errorf("tool %q: already registered", t.Name)
		}
		if cur, taken := served[t.Name]; taken && cur != r.builtin[t.Name] {
			return fmt.Errorf("tool %q: already registered", t.Name)
		}
		builtin[t.Name] = t
	}
	r.builtin = builtin
	r.publish()
	return nil
}

// Source returns the tools of the source id, such as "http", "mcp:files" or
// "remote:agent": one per source, offering nothing until its first Set.
func (r *Registry) Source(id string) SourceTools {
	if id == "" || id == Builtin {
		panic("tools: a source id must be neither empty nor " + Builtin)
	}
	return SourceTools{r: r, id: id}
}

// Builtin is what Owner names the built-in tools' owner; no source may use
// it as its id.
const Builtin = "builtin"

// Owner reports who serves the tool name: Builtin, or the id of the source
// whose tool it is. ok is false when no tool of that name is served.
func (r *Registry) Owner(name string) (owner string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owner(name)
}

func (r *Registry) owner(name string) (string, bool) {
	if _, ok := r.builtin[name]; ok {
		return Builtin, true
	}
	if ids := r.claims[name]; len(ids) > 0 {
		return ids[0], true
	}
	return "", false
}

// SourceTools are the tools one source offers; see Registry.Source.
type SourceTools struct {
	r  *Registry
	id string
}

// Serves reports whether the registry serves the source's tool name.
func (s SourceTools) Serves(name string) bool {
	owner, ok := s.r.Owner(name)
	return ok && owner == s.id
}

// Set replaces the source's tools with list in one atomic step: one new
// revision, or none when nothing served changes. Set() with nothing removes
// them all. A tool whose name a built-in or an earlier source holds is not
// served until that owner drops the name; Set returns such names the first
// time they are held back (a name still held back at the next Set is not
// returned again), so the source logs each clash once. An invalid tool, or
// a name listed twice, is an error, and nothing changes.
func (s SourceTools) Set(list ...Tool) (skipped []string, err error) {
	prepared, err := prepareAll(list)
	if err != nil {
		return nil, err
	}
	tools := make(map[string]*Tool, len(prepared))
	for _, t := range prepared {
		if _, dup := tools[t.Name]; dup {
			return nil, fmt.Errorf("tool %q: listed twice", t.Name)
		}
		tools[t.Name] = t
	}
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.offers[s.id]
	if prev == nil {
		prev = &offer{}
	}
	for name := range prev.tools {
		if _, kept := tools[name]; !kept {
			r.claims[name] = slices.DeleteFunc(r.claims[name], func(id string) bool { return id == s.id })
			if len(r.claims[name]) == 0 {
				delete(r.claims, name)
			}
		}
	}
	for name := range tools {
		if _, had := prev.tools[name]; !had {
			r.claims[name] = append(r.claims[name], s.id)
		}
	}
	next := &offer{tools: tools, skipped: map[string]bool{}}
	for name := range tools {
		if owner, _ := r.owner(name); owner != s.id {
			next.skipped[name] = true
			if !prev.skipped[name] {
				skipped = append(skipped, name)
			}
		}
	}
	slices.Sort(skipped)
	if len(tools) == 0 {
		delete(r.offers, s.id)
	} else {
		r.offers[s.id] = next
	}
	r.publish()
	return skipped, nil
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

// publish makes the served set from the built-ins and each name's first
// claimant, and stores it when it differs from the current one; r.mu is
// held.
func (r *Registry) publish() {
	byName := maps.Clone(r.builtin)
	for name, ids := range r.claims {
		if _, builtin := byName[name]; !builtin {
			byName[name] = r.offers[ids[0]].tools[name]
		}
	}
	cur := r.snap.Load()
	if maps.Equal(byName, cur.byName) {
		return
	}
	next := newSnapshot(byName)
	next.owners = make(map[string]string, len(byName))
	for name := range byName {
		next.owners[name], _ = r.owner(name)
	}
	r.snap.Store(next)
	// Tools declared the same way as before (a reconnected server's, say)
	// make no new revision, so watchers are told nothing; their handlers
	// are swapped in all the same.
	if next.revision != cur.revision {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// prepare validates a tool and returns a copy with its schemas compiled.
// validJSONText returns b with what is not UTF-8 replaced by U+FFFD.
func validJSONText(b json.RawMessage) json.RawMessage {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}

func prepare(t Tool) (*Tool, error) { return (*SchemaCache)(nil).prepare(t) }

func (c *SchemaCache) prepare(t Tool) (*Tool, error) {
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
	// What is not UTF-8 in a declaration (a gRPC upstream's comments are
	// proto2 strings, unchecked) would fail ListTools for every caller.
	t.Title, t.Description = strings.ToValidUTF8(t.Title, "\uFFFD"), strings.ToValidUTF8(t.Description, "\uFFFD")
	t.InputSchema, t.OutputSchema = validJSONText(t.InputSchema), validJSONText(t.OutputSchema)
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
	if t.input == nil || !same(t.inputSrc, t.InputSchema) {
		cs := c.compile(t.InputSchema).get()
		if cs.err != nil {
			return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, cs.err)
		}
		t.input, t.inputFlat, t.inputCaseNames, t.inputCost, t.inputSrc = cs.schema, cs.flat, cs.caseNames, cs.cost, t.InputSchema
	}
	switch {
	case len(t.OutputSchema) == 0:
		t.output, t.outputFlat, t.outputCost, t.outputSrc, t.outputLazy = nil, nil, nil, nil, nil
	case (t.output == nil && t.outputLazy == nil) || !same(t.outputSrc, t.OutputSchema):
		t.output, t.outputFlat, t.outputCost, t.outputLazy, t.outputSrc = nil, nil, nil, nil, t.OutputSchema
		cs := c.compile(t.OutputSchema)
		if c != nil && c.DeferOutput {
			t.outputLazy = cs
			break
		}
		if cs = cs.get(); cs.err != nil {
			return nil, fmt.Errorf("tool %q: output schema: %w", t.Name, cs.err)
		}
		t.output, t.outputFlat, t.outputCost = cs.schema, cs.flat, cs.cost
	}
	return &t, nil
}

// same reports whether a and b are the same text in the same memory: a
// schema compiled before and not replaced since.
func same(a, b json.RawMessage) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// SchemaCache compiles tools' schemas ahead of a registry, each distinct
// schema text once: tools that declare the same schema (a document's
// operations that answer with the same resource) share what it compiles
// to. A nil *SchemaCache compiles every schema. It is safe for concurrent
// use; the zero value is ready.
type SchemaCache struct {
	// DeferOutput leaves each output schema to be compiled when a result
	// is first checked against it, so a source that offers thousands of
	// tools from one document pays only for the ones called. One that
	// does not compile then fails that check (ValidateOutput's error),
	// which the engine notes beside an Upstream tool's result.
	DeferOutput bool

	mu sync.Mutex
	m  map[[32]byte]*compiledSchema
}

// compiledSchema is one schema text, compiled at its first get.
type compiledSchema struct {
	text   json.RawMessage
	once   sync.Once
	schema *jsonschema.Schema
	flat   *flatSchema
	// caseNames are the property names the schema declares in more
	// than one case (keys.go).
	caseNames map[string]bool
	cost      *costNode // costGraph's, when checking may multiply with a value's depth
	err       error     // why it does not compile
}

func (cs *compiledSchema) get() *compiledSchema {
	cs.once.Do(func() {
		if cs.schema, cs.caseNames, cs.cost, cs.err = compileSchema(cs.text); cs.err == nil {
			cs.flat = compileFlat(cs.text)
		}
	})
	return cs
}

// compile returns text's compiledSchema, not compiled yet unless another
// tool's use compiled it.
func (c *SchemaCache) compile(text json.RawMessage) *compiledSchema {
	if c == nil {
		return &compiledSchema{text: text}
	}
	key := sha256.Sum256(text)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs, ok := c.m[key]; ok {
		return cs
	}
	cs := &compiledSchema{text: text}
	if c.m == nil {
		c.m = map[[32]byte]*compiledSchema{}
	}
	c.m[key] = cs
	return cs
}

// Compile returns t with its schemas compiled, or the error adding t to a
// registry would give. A registry does not compile a compiled tool's
// schemas again, so a source that checks its tools before offering them
// (an OpenAPI document's) compiles each schema once.
func (c *SchemaCache) Compile(t Tool) (Tool, error) {
	p, err := c.prepare(t)
	if err != nil {
		return Tool{}, err
	}
	return *p, nil
}

// Snapshot is an immutable set of tools with its revision.
type Snapshot struct {
	byName   map[string]*Tool
	owners   map[string]string // by name: Builtin or the source id (Registry.Owner)
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

// Owner reports who served the tool name when the snapshot was taken:
// Builtin, or the id of the source whose tool it is ("mcp:files",
// "openapi:github"); "" when the snapshot holds no tool of that name.
func (s *Snapshot) Owner(name string) string { return s.owners[name] }

// Tools returns the tools sorted by name. The slice must not be modified.
func (s *Snapshot) Tools() []*Tool { return s.sorted }

// Names returns the tool names, sorted. The slice must not be modified.
func (s *Snapshot) Names() []string { return s.names }

// Len returns the number of tools.
func (s *Snapshot) Len() int { return len(s.sorted) }
