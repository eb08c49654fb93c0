package grpcserve

import (
	"context"
	"github.com/toolwire/toolwire/engine"
	"slices"
	"strings"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

func TestListToolsSortedWithRevisionThatChanges(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, engine.Config{})
	ctx := context.Background()
	first, err := ts.client.ListTools(ctx, &toolwirev1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range first.GetTools() {
		names = append(names, tl.GetName())
	}
	if !slices.IsSorted(names) || !slices.Contains(names, "echo") {
		t.Errorf("names %v, want sorted and containing echo", names)
	}
	echo := first.GetTools()[slices.Index(names, "echo")]
	if !echo.GetAnnotations().GetReadOnly() || !strings.Contains(echo.GetInputSchema(), `"text"`) || echo.GetSource() != toolwirev1.ToolSource_TOOL_SOURCE_BUILTIN {
		t.Errorf("echo declaration = %v", echo)
	}
	if err := ts.reg.Add(tools.Tool{Name: "new", Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	second, err := ts.client.ListTools(ctx, &toolwirev1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if second.GetRevision() == first.GetRevision() || len(second.GetTools()) != len(first.GetTools())+1 {
		t.Errorf("after Add: revision %q (was %q), %d tools (was %d)", second.GetRevision(), first.GetRevision(), len(second.GetTools()), len(first.GetTools()))
	}
}

func TestWatchToolsSendsCurrentRevisionAndChanges(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, engine.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := ts.client.WatchTools(ctx, &toolwirev1.WatchToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetRevision() != ts.reg.Snapshot().Revision() {
		t.Fatalf("first = %v, %v; want the current revision", first, err)
	}
	ts.reg.Remove("echo")
	second, err := stream.Recv()
	if err != nil || second.GetRevision() == first.GetRevision() || second.GetRevision() != ts.reg.Snapshot().Revision() {
		t.Fatalf("after a change: %v, %v; want the new revision", second, err)
	}
}
