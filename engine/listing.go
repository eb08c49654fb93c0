package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/toolwire/toolwire/engine/internal/slots"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/search"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The bounds of ListTools and SearchTools, which every surface lists by.
const (
	// MaxPageSize is the most tools one page of ListTools holds; a larger
	// page_size is taken as it. MCP's tools/list pages hold as many.
	MaxPageSize = 1000
	// DefaultSearchResults is what SearchTools returns at most when the
	// request says nothing; MaxSearchResults the most it returns.
	DefaultSearchResults = 10
	MaxSearchResults     = 100
	// maxPageTokenBytes bounds a page token; the server's own are far
	// shorter (a revision and a tool name).
	maxPageTokenBytes = 512
	// pageMargin is what a page leaves of MaxMessageBytes for the
	// response's other fields and the transport's framing.
	pageMargin = 64 << 10
	// scanFree is the most tools a catalog may hold for its listings and
	// searches to run without a scan slot (Scan): below it one costs
	// about a millisecond at most.
	scanFree = 1000
)

// scanSlots is how many listings and searches of a catalog of more than
// scanFree tools run at once, server-wide: half the CPUs the process may
// use, so the rest stay for the calls. Each caller has one of them at a
// time (the anonymous caller, when authentication is off, is not held to
// it); the others wait their turn, first come, first served.
func scanSlots() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Scan waits for a scan slot when snap holds more than scanFree tools,
// for at most MaxQueueWait, and returns what gives it back; a wait that
// ends without one is ResourceExhausted (or ctx's error). A listing, a
// search or a server view is a pass over every tool the request reaches,
// as costly to the server as the catalog is large (a search of 32 terms
// met in every tool took 118 ms over 40,000 of them), and one request
// costs its caller next to nothing: without a bound, 32 searches at once
// took the CPU from everything else. ListTools and SearchTools take one;
// so does a surface's own pass over a snapshot for a request (the server
// view's, package serverstatus).
func (e *Engine) Scan(ctx context.Context, snap *tools.Snapshot) (release func(), err error) {
	if snap.Len() <= scanFree {
		return func() {}, nil
	}
	cs, err := e.scans.Acquire(ctx, CallerFrom(ctx), e.cfg.MaxQueueWait)
	if err != nil {
		var busy *slots.BusyError
		switch {
		case !errors.As(err, &busy):
			return nil, contextError(err)
		case busy.PerCaller:
			return nil, errorf(ResourceExhausted, "this caller is listing or searching the tools already, and that did not end within %s; list or search one at a time", e.cfg.MaxQueueWait)
		}
		return nil, errorf(ResourceExhausted, "the server is running its limit of %d listings and searches of its %d tools at once, and none ended within %s; retry with backoff", busy.Limit, snap.Len(), e.cfg.MaxQueueWait)
	}
	return func() { e.scans.Release(cs) }, nil
}

// ListLimit is the most bytes, in protobuf, one response of ListTools or
// SearchTools carries: Config.MaxListBytes, what a listing of every tool at
// once may take and what a single declaration may take (a page otherwise
// stays within MaxMessageBytes). A surface's transport must be able to
// send a response of that size.
func (e *Engine) ListLimit() int { return e.cfg.MaxListBytes }

// pageBudget is the most bytes of declarations one page, or one search
// answer, holds, unless its one tool is larger: within MaxMessageBytes, so
// a client that receives messages of that size receives every page.
func (e *Engine) pageBudget() int {
	return max(e.cfg.MaxMessageBytes-pageMargin, e.cfg.MaxMessageBytes/2)
}

// catalog keeps what listing and searching read of the last snapshot
// listed: each tool's declaration and its size, made once per revision
// rather than once per request (10,000 GitHub-sized tools are 45 MB of
// declarations), and the search index, made at the first search. A new
// snapshot replaces it.
type catalog struct {
	mu  sync.Mutex // serialises making one, so it is made once
	cur atomic.Pointer[listing]
}

// listing is one snapshot's declarations, shared by every response that
// lists them: they are never modified.
type listing struct {
	snap  *tools.Snapshot
	decls []*toolwirev1.Tool // in the snapshot's order, by name
	sizes []int              // what each adds to a response (listedSize)
	index func() *search.Index
}

func (c *catalog) of(snap *tools.Snapshot) *listing {
	if l := c.cur.Load(); l != nil && l.snap == snap {
		return l
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.cur.Load(); l != nil && l.snap == snap {
		return l
	}
	ts := snap.Tools()
	l := &listing{snap: snap, decls: make([]*toolwirev1.Tool, len(ts)), sizes: make([]int, len(ts))}
	for i, t := range ts {
		l.decls[i] = Declaration(t)
		l.sizes[i] = listedSize(l.decls[i])
	}
	l.index = sync.OnceValue(func() *search.Index { return search.NewIndex(snap) })
	c.cur.Store(l)
	return l
}

// ListTools answers a ListTools request for the caller of ctx from snap:
// the caller's permitted tools sorted by name, all of them when the request
// sets no page_size (up to ListLimit bytes; ResourceExhausted beyond), else
// a page of at most page_size (and MaxPageSize) tools within pageBudget
// bytes, with a token for the next page when there is one. A page token
// names the revision and the last tool of its page, so the next page
// starts after that name; a token of another revision than snap's is
// Aborted (the listing starts again), one the server did not make is
// InvalidArgument. Over a catalog of more than scanFree tools it first
// waits its turn (Scan). Every surface lists with it. The response's tools are
// shared with other responses (made once per revision): read them, never
// modify them.
func (e *Engine) ListTools(ctx context.Context, snap *tools.Snapshot, req *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	size := req.GetPageSize()
	if size < 0 {
		return nil, &Error{Code: InvalidArgument, Message: fmt.Sprintf("page_size is %d; it must be positive, or 0 for every tool at once", size)}
	}
	release, err := e.Scan(ctx, snap)
	if err != nil {
		return nil, err
	}
	defer release()
	ts := snap.Tools()
	start := 0
	if tok := req.GetPageToken(); tok != "" {
		rev, after, ok := decodePageToken(tok)
		if !ok {
			return nil, &Error{Code: InvalidArgument, Message: "page_token is not one this server gave; list from the first page with an empty page_token"}
		}
		if rev != snap.Revision() {
			return nil, &Error{Code: Aborted, Message: fmt.Sprintf("the tools changed since this listing began (revision %s, now %s): list them again from the first page", rev, snap.Revision())}
		}
		start = sort.Search(len(ts), func(i int) bool { return ts[i].Name > after })
	}
	resp := &toolwirev1.ListToolsResponse{Revision: snap.Revision()}
	paged := size > 0
	count, budget := len(ts), e.ListLimit()
	if paged {
		count, budget = int(min(size, MaxPageSize)), e.pageBudget()
	}
	l := e.catalog.of(snap)
	resp.Tools = make([]*toolwirev1.Tool, 0, min(count, len(ts)-start))
	used := 0
	for i := start; i < len(ts); i++ {
		t := ts[i]
		if !e.Permits(ctx, t.Name) {
			continue
		}
		if len(resp.Tools) == count {
			resp.NextPageToken = pageToken(snap.Revision(), resp.Tools[len(resp.Tools)-1].GetName())
			break
		}
		n := l.sizes[i]
		if n > e.ListLimit() {
			e.deps.Logger.WarnContext(ctx, "ListTools refused: a declaration is too large to send", "tool", t.Name, "bytes", n, "limit_bytes", e.ListLimit())
			return nil, declarationTooLarge(t.Name, n, e.ListLimit())
		}
		if used+n > budget {
			if !paged {
				e.deps.Logger.WarnContext(ctx, "ListTools refused: every tool at once is more than a response carries; the client must page",
					"caller", CallerFrom(ctx), "limit_bytes", budget, "tools_fitting", len(resp.Tools))
				return nil, &Error{Code: ResourceExhausted, Message: fmt.Sprintf(
					"the tools this caller may call take more than %d bytes, more than one response carries: list them a page at a time (page_size and page_token; toolwire's clients do)", budget)}
			}
			if len(resp.Tools) > 0 {
				resp.NextPageToken = pageToken(snap.Revision(), resp.Tools[len(resp.Tools)-1].GetName())
				break
			}
			// A page's first tool goes alone, however large, within ListLimit.
		}
		resp.Tools = append(resp.Tools, l.decls[i])
		used += n
	}
	return resp, nil
}

// SearchTools answers a SearchTools request for the caller of ctx from
// snap: the caller's permitted tools that match the query (package
// search's rules), best first, at most max_results of them within
// pageBudget bytes (at least one, when any matches), and how many matched.
// A query search refuses, or a negative max_results, is InvalidArgument.
// It waits its turn as ListTools does. Its tools are shared as ListTools'
// are.
func (e *Engine) SearchTools(ctx context.Context, snap *tools.Snapshot, req *toolwirev1.SearchToolsRequest) (*toolwirev1.SearchToolsResponse, error) {
	q, err := search.Parse(req.GetQuery())
	if err != nil {
		return nil, &Error{Code: InvalidArgument, Message: err.Error(), cause: err}
	}
	limit := req.GetMaxResults()
	switch {
	case limit < 0:
		return nil, &Error{Code: InvalidArgument, Message: fmt.Sprintf("max_results is %d; it must be positive, or 0 for %d", limit, DefaultSearchResults)}
	case limit == 0:
		limit = DefaultSearchResults
	}
	limit = min(limit, MaxSearchResults)
	release, err := e.Scan(ctx, snap)
	if err != nil {
		return nil, err
	}
	defer release()
	l := e.catalog.of(snap)
	best, total := l.index().Find(q, func(t *tools.Tool) bool { return e.Permits(ctx, t.Name) }, int(limit))
	resp := &toolwirev1.SearchToolsResponse{Revision: snap.Revision(), TotalMatches: int32(total)}
	used, budget := 0, e.pageBudget()
	for _, i := range best {
		t, d, n := snap.Tools()[i], l.decls[i], l.sizes[i]
		if used+n > budget && len(resp.Tools) > 0 {
			break
		}
		if n > e.ListLimit() {
			return nil, declarationTooLarge(t.Name, n, e.ListLimit())
		}
		resp.Tools = append(resp.Tools, d)
		used += n
	}
	return resp, nil
}

// declarationTooLarge refuses a listing that would hold a declaration larger than
// any response carries.
func declarationTooLarge(name string, n, limit int) *Error {
	return &Error{Code: ResourceExhausted, Message: fmt.Sprintf("tool %q's declaration is %d bytes, more than one response carries (%d)", name, n, limit)}
}

// listedSize is what d adds to a response's repeated field: its bytes, its
// length and its tag.
func listedSize(d *toolwirev1.Tool) int {
	n := proto.Size(d)
	return n + protowire.SizeVarint(uint64(n)) + 1
}

// A page token is "p1", the revision and the last tool of the page, on
// lines of their own, in URL-safe base64: opaque to clients, and short.
const pageTokenVersion = "p1"

func pageToken(revision, last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenVersion + "\n" + revision + "\n" + last))
}

func decodePageToken(tok string) (revision, last string, ok bool) {
	if len(tok) > maxPageTokenBytes {
		return "", "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", "", false
	}
	parts := strings.Split(string(b), "\n")
	if len(parts) != 3 || parts[0] != pageTokenVersion || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[1], parts[2], true
}
