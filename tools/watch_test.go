package tools_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolwire/toolwire/tools"
)

// TestWatch checks the one WatchTools loop: the revision now, then one
// per change (none for a change that leaves the revision as it was), and
// an end when stop closes or ctx is done.
func TestWatch(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name string) tools.Tool {
		return tools.Tool{Name: name, Description: name, InputSchema: json.RawMessage(`{"type":"object"}`),
			Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return &tools.Result{}, nil }}
	}
	stop := make(chan struct{})
	var seen []string
	for snap := range reg.Watch(t.Context(), stop) {
		seen = append(seen, snap.Revision())
		switch len(seen) {
		case 1:
			if err := reg.Add(tool("a")); err != nil {
				t.Fatal(err)
			}
		case 2:
			reg.Remove("missing") // no change: no yield
			if err := reg.Add(tool("b")); err != nil {
				t.Fatal(err)
			}
		case 3:
			close(stop)
		}
	}
	if len(seen) != 3 || seen[0] == seen[1] || seen[1] == seen[2] {
		t.Errorf("revisions seen %v; want three distinct, ended by stop", seen)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := 0
	for range reg.Watch(ctx, nil) {
		n++
		cancel()
	}
	if n != 1 {
		t.Errorf("after ctx done: %d yields; want 1", n)
	}
}
