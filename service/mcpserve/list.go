package mcpserve

import (
	"context"
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// MetaRevision is the tools/list result's _meta key holding the
// registry's revision (as ListTools' revision): the same on every replica
// serving the same tools.
const MetaRevision = "toolwire.dev/revision"

// listTools answers tools/list: the caller's permitted tools from one
// snapshot, a page at a time (Engine.ListTools, as ListTools pages: at most
// PageSize tools within the engine's MaxMessageBytes, the cursor bound to
// the revision), with cache hints. The list is per caller, so its
// cacheScope is "private". A cursor of an earlier revision is refused as
// one the server never gave (invalid params, data.code "aborted"): the
// client lists again from the start, as the list-changed notice it gets
// asks anyway.
func (s *Server) listTools(ctx context.Context, req *mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	snap := s.reg.Snapshot()
	var cursor string
	if req.Params != nil {
		cursor = req.Params.Cursor
	}
	page, err := s.eng.ListTools(ctx, snap, &toolwirev1.ListToolsRequest{PageSize: int32(min(s.opts.PageSize, engine.MaxPageSize)), PageToken: cursor})
	if err != nil {
		return nil, rpcError(err)
	}
	res := &mcp.ListToolsResult{
		Meta:       mcp.Meta{MetaRevision: page.GetRevision()},
		Cacheable:  mcp.Cacheable{TTLMs: int(s.listTTL(page.GetRevision()) / time.Millisecond), CacheScope: "private"},
		NextCursor: page.GetNextPageToken(),
		Tools:      make([]*mcp.Tool, len(page.GetTools())),
	}
	for i, d := range page.GetTools() {
		res.Tools[i] = mcpTool(d)
	}
	return res, nil
}

// mcpTool is a toolwire declaration as MCP has it. Every annotation is
// stated, so MCP's defaults for absent hints (destructive, open-world)
// never stand in for what the tool declared.
func mcpTool(d *toolwirev1.Tool) *mcp.Tool {
	a := d.GetAnnotations()
	destructive, openWorld := a.GetDestructive(), a.GetOpenWorld()
	t := &mcp.Tool{
		Name:        d.GetName(),
		Title:       d.GetTitle(),
		Description: d.GetDescription(),
		InputSchema: json.RawMessage(d.GetInputSchema()),
		Annotations: &mcp.ToolAnnotations{
			ReadOnlyHint:    a.GetReadOnly(),
			DestructiveHint: &destructive,
			IdempotentHint:  a.GetIdempotent(),
			OpenWorldHint:   &openWorld,
		},
	}
	if o := d.GetOutputSchema(); o != "" {
		t.OutputSchema = json.RawMessage(o)
	}
	return t
}

// revision is the registry's revision and when this replica first served
// it.
type revision struct {
	id    string
	since time.Time
}

// listTTL is the ttlMs hint for a list of revision rev: a tenth of how long
// rev has held (HTTP's heuristic freshness, RFC 9111 §4.2.2), up to
// MaxListTTL; 0 while the watcher has not yet seen rev.
func (s *Server) listTTL(rev string) time.Duration {
	cur := s.rev.Load()
	if cur == nil || cur.id != rev {
		return 0
	}
	return min(time.Since(cur.since)/10, s.opts.MaxListTTL).Truncate(time.Millisecond)
}

// dispatcher names the one tool in the SDK's own tool set. toolwire lists
// its tools itself, and its middleware routes every tools/call here, with
// the name called in the context, so the SDK's call path runs whatever the
// name. The SDK sends list-changed notices (to 2025-11-25 sessions, and on
// the 2026-07-28 subscriptions/listen streams that asked for them) only
// when that set changes, so the dispatcher is replaced at each new
// revision of the registry. No client sees it: tools/list never lists the
// SDK's set, and a call of its name is a call of an unknown tool.
const dispatcher = "toolwire.dispatch"

// markRevision records rev and replaces the dispatcher, which makes the
// SDK notify (debounced by 10ms) every session when there is one.
func (s *Server) markRevision(rev string) {
	s.rev.Store(&revision{id: rev, since: time.Now()})
	s.sdk.AddTool(&mcp.Tool{Name: dispatcher, Description: rev, InputSchema: json.RawMessage(`{"type":"object"}`)}, s.dispatch)
}

// watch follows the registry until Close.
func (s *Server) watch() {
	defer s.stopped.Done()
	for snap := range s.reg.Watch(context.Background(), s.stop) {
		if rev := snap.Revision(); rev != s.rev.Load().id {
			s.markRevision(rev)
		}
	}
}
