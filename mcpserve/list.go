package mcpserve

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// MetaRevision is the tools/list result's _meta key holding the
// registry's revision (as ListTools' revision): the same on every replica
// serving the same tools.
const MetaRevision = "toolwire.dev/revision"

// listTools answers tools/list: the caller's permitted tools from one
// snapshot, a page at a time, with cache hints. The list is per caller, so
// its cacheScope is "private".
func (s *Server) listTools(ctx context.Context, req *mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	snap := s.reg.Snapshot()
	decls := s.eng.Tools(ctx, snap) // sorted by name
	if req.Params != nil && req.Params.Cursor != "" {
		c := req.Params.Cursor
		after, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/list: the cursor is not one this server gave"}
		}
		i := sort.Search(len(decls), func(i int) bool { return decls[i].GetName() > string(after) })
		decls = decls[i:]
	}
	res := &mcp.ListToolsResult{
		Meta:      mcp.Meta{MetaRevision: snap.Revision()},
		Cacheable: mcp.Cacheable{TTLMs: int(s.listTTL(snap.Revision()) / time.Millisecond), CacheScope: "private"},
	}
	if len(decls) > s.opts.PageSize {
		decls = decls[:s.opts.PageSize]
		res.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(decls[len(decls)-1].GetName()))
	}
	res.Tools = make([]*mcp.Tool, len(decls))
	for i, d := range decls {
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
