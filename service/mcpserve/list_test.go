package mcpserve

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
)

// TestListPagesLargeCatalog: tools/list pages a catalog larger than
// max_message_bytes as ListTools does: pages within it, every tool once,
// in name order.
func TestListPagesLargeCatalog(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	if _, err := gencatalog.Register(ts.reg, "github", gencatalog.Light(1500)); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, ts.url, "alice-token", RevisionSessions, nil)
	var names []string
	pages, cursor := 0, ""
	for {
		res, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	// 6.8 MB in pages within 4 MiB: at least two, though PageSize is 1000.
	want := ts.eng.Tools(engine.WithCaller(context.Background(), "alice"), ts.reg.Snapshot())
	if len(names) != len(want) || len(names) < 1500 || pages < 2 {
		t.Errorf("%d tools in %d pages, want %d in 2 or more", len(names), pages, len(want))
	}
}

// TestListCursorOfAnEarlierRevision: once the tools change, a cursor of
// the revision before is refused as an invalid one is (invalid params),
// with data.code "aborted", saying to list again.
func TestListCursorOfAnEarlierRevision(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{PageSize: 2})
	cs := connect(t, ts.url, "alice-token", RevisionSessions, nil)
	first, err := cs.ListTools(context.Background(), nil)
	if err != nil || first.NextCursor == "" {
		t.Fatalf("first page: %v, cursor %q", err, first.NextCursor)
	}
	ts.reg.Remove("echo")
	_, err = cs.ListTools(context.Background(), &mcp.ListToolsParams{Cursor: first.NextCursor})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(string(je.Data), `"aborted"`) || !strings.Contains(je.Message, "from the first page") {
		t.Errorf("a cursor of the revision before: %v, want invalid params, aborted", err)
	}
}
