package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// TestRegistrySource: a source swaps its own tools in one step, and a name
// another owner holds is left out instead of failing the update.
func TestRegistrySource(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(Tool{Name: "other_x", Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	src := r.Source("src")
	skipped, err := src.Set(Tool{Name: "src_a", Handler: nop}, Tool{Name: "other_x", Handler: nop})
	if err != nil || strings.Join(skipped, ",") != "other_x" || names(r) != "other_x,src_a" {
		t.Fatalf("Set = %v, %v, names %s; want other_x skipped, src_a added", skipped, err, names(r))
	}
	if x, _ := r.Snapshot().Lookup("other_x"); x.Source != SourceBuiltin {
		t.Errorf("other_x is the %v tool; the built-in must keep its name", x.Source)
	}
	// The old set goes in the same step as the new one comes: one revision.
	changed, rev := r.Changed(), r.Snapshot().Revision()
	if _, err := src.Set(Tool{Name: "src_b", Handler: nop}, Tool{Name: "src_c", Handler: nop}); err != nil {
		t.Fatal(err)
	}
	<-changed
	if names(r) != "other_x,src_b,src_c" || r.Snapshot().Revision() == rev {
		t.Errorf("after a second Set: %s at %s (was %s)", names(r), r.Snapshot().Revision(), rev)
	}
	before := r.Snapshot()
	for _, bad := range [][]Tool{
		{{Name: "src_d", Handler: nop}, {Name: "bad name", Handler: nop}},
		{{Name: "src_d", Handler: nop}, {Name: "src_d", Handler: nop}},
	} {
		if _, err := src.Set(bad...); err == nil || r.Snapshot() != before {
			t.Errorf("Set(%v): %v, registry changed %v; want an error and no change", bad, err, r.Snapshot() != before)
		}
	}
	if !src.Serves("src_b") || src.Serves("other_x") || src.Serves("nothing") {
		t.Errorf("Serves: src_b %v, other_x %v, nothing %v; want true, false, false", src.Serves("src_b"), src.Serves("other_x"), src.Serves("nothing"))
	}
	if owner, ok := r.Owner("src_b"); owner != "src" || !ok {
		t.Errorf("Owner(src_b) = %q, %v", owner, ok)
	}
	if owner, ok := r.Owner("other_x"); owner != Builtin || !ok {
		t.Errorf("Owner(other_x) = %q, %v; want the built-ins", owner, ok)
	}
	if err := r.Add(Tool{Name: "src_b", Handler: nop}); err == nil {
		t.Error("Add took a name a source serves")
	}
	if _, err := src.Set(); err != nil || names(r) != "other_x" {
		t.Errorf("Set() with nothing: %v, names %s; want only other_x left", err, names(r))
	}
	if _, ok := r.Owner("src_b"); ok {
		t.Error("Owner(src_b) after Set(): still served")
	}
}

// TestRegistryNameClash: between sources, the first to offer a name keeps
// it; a later one is held back, told once, and gets the name in the same
// update in which the owner drops it. A built-in keeps its name whatever
// the sources offer, and when it goes the first source in line gets it.
func TestRegistryNameClash(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(Tool{Name: "b", Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name, desc string) Tool {
		return Tool{Name: name, Description: desc, Handler: nop, Source: SourceMCP}
	}
	desc := func(name string) string {
		tl, ok := r.Snapshot().Lookup(name)
		if !ok {
			return "(none)"
		}
		return tl.Description
	}
	one, two := r.Source("one"), r.Source("two")
	if skipped, _ := one.Set(tool("x", "one"), tool("b", "one")); !cmp.Equal(skipped, []string{"b"}) {
		t.Errorf("one skipped %v; want [b]", skipped)
	}
	if skipped, _ := two.Set(tool("x", "two"), tool("y", "two"), tool("b", "two")); !cmp.Equal(skipped, []string{"b", "x"}) {
		t.Errorf("two skipped %v; want [b x]", skipped)
	}
	if desc("x") != "one" || desc("y") != "two" || desc("b") != "" {
		t.Errorf("x is %s's, y %s's, b %q's; want one's, two's and the built-in's", desc("x"), desc("y"), desc("b"))
	}
	// A refresh that changes nothing reports nothing again.
	if skipped, _ := two.Set(tool("x", "two"), tool("y", "two"), tool("b", "two")); len(skipped) != 0 {
		t.Errorf("two's second Set skipped %v; a clash is reported once", skipped)
	}
	// one drops x: two gets it in the same step, one new revision.
	changed, rev := r.Changed(), r.Snapshot().Revision()
	if _, err := one.Set(tool("b", "one")); err != nil {
		t.Fatal(err)
	}
	<-changed
	if desc("x") != "two" || r.Snapshot().Revision() == rev {
		t.Errorf("after one dropped x: x is %s's at revision %s (was %s); want two's at a new one", desc("x"), r.Snapshot().Revision(), rev)
	}
	if owner, _ := r.Owner("x"); owner != "two" {
		t.Errorf("Owner(x) = %q", owner)
	}
	// The built-in goes: one, first in line for b, gets it.
	r.Remove("b")
	if desc("b") != "one" {
		t.Errorf("after the built-in b went, b is %s's; want one's", desc("b"))
	}
	// one offering x again queues behind two.
	if skipped, _ := one.Set(tool("b", "one"), tool("x", "one")); !cmp.Equal(skipped, []string{"x"}) || desc("x") != "two" {
		t.Errorf("one offering x again: skipped %v, x is %s's; want [x] and two's", skipped, desc("x"))
	}
}

func names(r *Registry) string { return strings.Join(r.Snapshot().Names(), ",") }
