package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func nop(context.Context, *Call) (*Result, error) { return nil, nil }

func TestRegistryRejectsInvalidTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tool Tool
		want string
	}{
		{"empty name", Tool{Handler: nop}, "name must match"},
		{"space in name", Tool{Name: "read file", Handler: nop}, "name must match"},
		{"slash in name", Tool{Name: "a/b", Handler: nop}, "name must match"},
		{"name too long", Tool{Name: strings.Repeat("a", 129), Handler: nop}, "name must match"},
		{"no handler", Tool{Name: "x"}, "no handler"},
		{"negative timeout", Tool{Name: "x", Handler: nop, Timeout: -1}, "negative timeout"},
		{"schema not JSON", Tool{Name: "x", Handler: nop, InputSchema: json.RawMessage(`{`)}, "input schema"},
		{"root not object", Tool{Name: "x", Handler: nop, InputSchema: json.RawMessage(`{"type":"string"}`)}, `root type "object"`},
		{"root type missing", Tool{Name: "x", Handler: nop, InputSchema: json.RawMessage(`{"properties":{}}`)}, `root type "object"`},
		{"schema does not compile", Tool{Name: "x", Handler: nop, InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"nonsense"}}}`)}, "input schema"},
		{"output schema does not compile", Tool{Name: "x", Handler: nop, OutputSchema: json.RawMessage(`{"minimum":"one"}`)}, "output schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := NewRegistry()
			if err != nil {
				t.Fatal(err)
			}
			err = r.Add(tt.tool)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Add = %v, want an error containing %q", err, tt.want)
			}
			if r.Snapshot().Len() != 0 {
				t.Error("an invalid tool was added")
			}
		})
	}
}

func TestRegistryAcceptsNamesOfThePattern(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "read_file", "mcp.github.search", "A-Z_0.9", strings.Repeat("z", 128)} {
		r, err := NewRegistry(Tool{Name: name, Handler: nop})
		if err != nil {
			t.Errorf("name %q: %v", name, err)
			continue
		}
		if _, ok := r.Snapshot().Lookup(name); !ok {
			t.Errorf("name %q not found after Add", name)
		}
	}
}

func TestRegistrySnapshotsAreImmutableAndRevisionsTrackTheSet(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(Tool{Name: "b", Handler: nop}, Tool{Name: "a", Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	before := r.Snapshot()
	changed := r.Changed()
	if got := before.Names(); strings.Join(got, ",") != "a,b" {
		t.Errorf("Names() = %v, want sorted [a b]", got)
	}

	if err := r.Add(Tool{Name: "a", Handler: nop}, Tool{Name: "c", Handler: nop}); err == nil {
		t.Error("adding a duplicate name succeeded")
	}
	if r.Snapshot() != before {
		t.Error("a failed Add changed the registry: Add must be all or nothing")
	}

	if err := r.Add(Tool{Name: "c", Handler: nop}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Error("Changed() was not closed by Add")
	}
	after := r.Snapshot()
	if before.Len() != 2 || after.Len() != 3 {
		t.Errorf("old snapshot has %d tools, new %d; want 2 and 3", before.Len(), after.Len())
	}
	if before.Revision() == after.Revision() {
		t.Error("revision did not change when a tool was added")
	}

	changed = r.Changed()
	r.Remove("c")
	if r.Snapshot().Revision() != before.Revision() {
		t.Error("the same set of tools should have the same revision")
	}
	r.Remove("nothing")
	select {
	case <-r.Changed():
		t.Error("removing nothing announced a change")
	default:
	}
	<-changed

	if err := r.Update([]string{"a"}, Tool{Name: "a", Description: "new", Handler: nop}); err != nil {
		t.Fatal(err)
	}
	if a, _ := r.Snapshot().Lookup("a"); a.Description != "new" {
		t.Error("Update did not replace the tool")
	}
}

func TestRegistryCopiesTools(t *testing.T) {
	t.Parallel()
	tool := Tool{Name: "x", Description: "before", Handler: nop}
	r, err := NewRegistry(tool)
	if err != nil {
		t.Fatal(err)
	}
	tool.Description = "after"
	if got, _ := r.Snapshot().Lookup("x"); got.Description != "before" {
		t.Error("changing the caller's Tool changed the registered one")
	}
}

// TestRegistryReplace: a source swaps its own tools in one step, and a name
// another source holds is left out instead of failing the update.
func TestRegistryReplace(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(Tool{Name: "other_x", Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	added, skipped, err := r.Replace(nil, Tool{Name: "src_a", Handler: nop}, Tool{Name: "other_x", Handler: nop})
	if err != nil || strings.Join(added, ",") != "src_a" || strings.Join(skipped, ",") != "other_x" {
		t.Fatalf("Replace = %v, %v, %v; want [src_a] added, [other_x] skipped", added, skipped, err)
	}
	// The source's own names may be registered again; the old set goes.
	added, skipped, err = r.Replace(added, Tool{Name: "src_a", Handler: nop}, Tool{Name: "src_b", Handler: nop})
	if err != nil || strings.Join(added, ",") != "src_a,src_b" || len(skipped) != 0 {
		t.Fatalf("second Replace = %v, %v, %v; want [src_a src_b], none skipped", added, skipped, err)
	}
	if got := strings.Join(r.Snapshot().Names(), ","); got != "other_x,src_a,src_b" {
		t.Errorf("Names() = %s", got)
	}
	before := r.Snapshot()
	if _, _, err := r.Replace(added, Tool{Name: "bad name", Handler: nop}); err == nil || r.Snapshot() != before {
		t.Errorf("Replace with an invalid tool: %v, registry changed %v; want an error and no change", err, r.Snapshot() != before)
	}
	if _, _, err := r.Replace(added); err != nil || strings.Join(r.Snapshot().Names(), ",") != "other_x" {
		t.Errorf("Replace with nothing: %v, names %v; want only other_x left", err, r.Snapshot().Names())
	}
}
