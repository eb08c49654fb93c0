package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/proto"
)

// catalogTools are n tools named t00000, t00001, …, each with a description
// of descBytes bytes.
func catalogTools(n, descBytes int) []tools.Tool {
	ts := make([]tools.Tool, n)
	for i := range ts {
		ts[i] = tools.Tool{
			Name:        fmt.Sprintf("t%05d", i),
			Title:       fmt.Sprintf("Tool %d", i),
			Description: strings.Repeat("x", descBytes),
			InputSchema: []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`),
			Handler:     func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil },
		}
	}
	return ts
}

// notEvery7th permits bob every tool but every seventh; everyone else all.
var notEvery7th = admit{permitted: func(caller, tool string) bool {
	var i int
	fmt.Sscanf(tool, "t%d", &i)
	return caller != "bob" || i%7 != 0
}}

func newCatalog(t *testing.T, cfg Config, deps Deps, ts ...tools.Tool) (*Engine, *tools.Registry) {
	t.Helper()
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	e := New(cfg, deps)
	t.Cleanup(e.Close)
	return e, reg
}

func names(ts []*toolwirev1.Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.GetName()
	}
	return out
}

// listAll pages through every tool as caller with pageSize, failing the
// test on an error, and returns the pages.
func listAll(t *testing.T, e *Engine, reg *tools.Registry, caller string, pageSize int32) []*toolwirev1.ListToolsResponse {
	t.Helper()
	var pages []*toolwirev1.ListToolsResponse
	token := ""
	for {
		page, err := e.ListTools(as(caller), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: pageSize, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", len(pages)+1, err)
		}
		pages = append(pages, page)
		if token = page.GetNextPageToken(); token == "" {
			return pages
		}
		if len(pages) > 10000 {
			t.Fatal("no last page")
		}
	}
}

// TestListToolsPages: pages of page_size (at most MaxPageSize) tools, in
// name order, the caller's permitted ones only, one revision, a token on
// every page but the last; together they are what one unpaged listing
// gives.
func TestListToolsPages(t *testing.T) {
	t.Parallel()
	e, reg := newCatalog(t, Config{}, Deps{Admission: notEvery7th}, catalogTools(2500, 100)...)
	all, err := e.ListTools(as("bob"), reg.Snapshot(), &toolwirev1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetTools()) != 2500-358 || all.GetNextPageToken() != "" || all.GetRevision() != reg.Snapshot().Revision() {
		t.Fatalf("unpaged: %d tools, token %q, revision %q", len(all.GetTools()), all.GetNextPageToken(), all.GetRevision())
	}
	if diff := cmp.Diff(names(e.Tools(as("bob"), reg.Snapshot())), names(all.GetTools())); diff != "" {
		t.Errorf("unpaged is not Tools (-Tools +ListTools):\n%s", diff)
	}
	for _, size := range []int32{1000, 5000, 333, 1} {
		pages := listAll(t, e, reg, "bob", size)
		var got []string
		for i, p := range pages {
			want := min(size, MaxPageSize)
			if last := i == len(pages)-1; !last && int32(len(p.GetTools())) != want {
				t.Errorf("page_size %d: page %d holds %d tools, want %d", size, i+1, len(p.GetTools()), want)
			}
			if p.GetRevision() != all.GetRevision() {
				t.Errorf("page_size %d: page %d of revision %q, want %q", size, i+1, p.GetRevision(), all.GetRevision())
			}
			got = append(got, names(p.GetTools())...)
		}
		if diff := cmp.Diff(names(all.GetTools()), got); diff != "" {
			t.Errorf("page_size %d: %d pages (-unpaged +paged):\n%s", size, len(pages), diff)
		}
	}
	// A token without page_size: the rest at once.
	first, _ := e.ListTools(as("bob"), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: 10})
	rest, err := e.ListTools(as("bob"), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageToken: first.GetNextPageToken()})
	if err != nil || len(rest.GetTools()) != len(all.GetTools())-10 || rest.GetNextPageToken() != "" {
		t.Errorf("the rest after a page of 10: %d tools, token %q, %v", len(rest.GetTools()), rest.GetNextPageToken(), err)
	}
	// A caller who may call nothing gets an empty last page.
	none, err := e.ListTools(as("bob"), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: 10, PageToken: pageToken(all.GetRevision(), "t99999")})
	if err != nil || len(none.GetTools()) != 0 || none.GetNextPageToken() != "" {
		t.Errorf("after the last name: %d tools, token %q, %v", len(none.GetTools()), none.GetNextPageToken(), err)
	}
}

// TestListToolsPageBytes: a page stays within MaxMessageBytes however many
// tools page_size allows, except a page's first tool, which goes alone
// however large (within ListLimit); no tool is lost.
func TestListToolsPageBytes(t *testing.T) {
	t.Parallel()
	const maxMsg = 256 << 10
	ts := catalogTools(60, 20<<10) // about 1.2 MB
	ts[30].Description = strings.Repeat("y", 300<<10)
	e, reg := newCatalog(t, Config{MaxMessageBytes: maxMsg}, Deps{}, ts...)
	pages := listAll(t, e, reg, "alice", 1000)
	var got []string
	for i, p := range pages {
		got = append(got, names(p.GetTools())...)
		if size := proto.Size(p); size > maxMsg && len(p.GetTools()) != 1 {
			t.Errorf("page %d: %d bytes in %d tools, over %d", i+1, size, len(p.GetTools()), maxMsg)
		}
	}
	if len(pages) < 6 {
		t.Errorf("%d pages; 1.5 MB in pages of 256 KiB needs 6 or more", len(pages))
	}
	if diff := cmp.Diff(names(e.Tools(as("alice"), reg.Snapshot())), got); diff != "" {
		t.Errorf("paged (-want +got):\n%s", diff)
	}
	var alone bool
	for _, p := range pages {
		alone = alone || (len(p.GetTools()) == 1 && p.GetTools()[0].GetName() == "t00030")
	}
	if !alone {
		t.Error("the 300 KiB tool is not alone on its page")
	}
}

// TestListToolsTooLarge: every tool at once past MaxListBytes, or one
// declaration past it, is ResourceExhausted saying what to do, and logged;
// paging still lists the rest.
func TestListToolsTooLarge(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	e, reg := newCatalog(t, Config{MaxMessageBytes: 256 << 10, MaxListBytes: 512 << 10}, Deps{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		catalogTools(60, 20<<10)...)
	if e.ListLimit() != 512<<10 {
		t.Fatalf("ListLimit %d", e.ListLimit())
	}
	_, err := e.ListTools(as("alice"), reg.Snapshot(), &toolwirev1.ListToolsRequest{})
	if CodeOf(err) != ResourceExhausted || !strings.Contains(err.Error(), "page_size and page_token") {
		t.Errorf("every tool at once: %v, want ResourceExhausted saying to page", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "the client must page") || !strings.Contains(logs.String(), "caller=alice") {
		t.Errorf("log: %s", logs.String())
	}
	if pages := listAll(t, e, reg, "alice", 1000); len(pages) < 2 {
		t.Errorf("paged: %d pages", len(pages))
	}
	// MaxListBytes is never below MaxMessageBytes.
	if e2, _ := newCatalog(t, Config{MaxMessageBytes: 8 << 20, MaxListBytes: 1 << 20}, Deps{}); e2.ListLimit() != 8<<20 {
		t.Errorf("ListLimit %d, want MaxMessageBytes", e2.ListLimit())
	}

	huge := catalogTools(3, 10)
	huge[1].Description = strings.Repeat("z", 600<<10)
	e, reg = newCatalog(t, Config{MaxMessageBytes: 256 << 10, MaxListBytes: 512 << 10}, Deps{}, huge...)
	for _, size := range []int32{0, 1, 100} {
		_, err := e.ListTools(as("alice"), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: size, PageToken: pageToken(reg.Snapshot().Revision(), "t00000")})
		if CodeOf(err) != ResourceExhausted || !strings.Contains(err.Error(), `tool "t00001"'s declaration is`) {
			t.Errorf("page_size %d over a declaration past MaxListBytes: %v", size, err)
		}
	}
	if _, err := e.SearchTools(as("alice"), reg.Snapshot(), &toolwirev1.SearchToolsRequest{Query: "zzz"}); CodeOf(err) != ResourceExhausted {
		t.Errorf("a search finding that declaration: %v", err)
	}
}

// TestListToolsTokens: a token of another revision is Aborted, naming
// both; one the server did not make, and a negative page_size, are
// InvalidArgument.
func TestListToolsTokens(t *testing.T) {
	t.Parallel()
	e, reg := newCatalog(t, Config{}, Deps{}, catalogTools(30, 10)...)
	first, err := e.ListTools(as("alice"), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: 10})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, token %q", err, first.GetNextPageToken())
	}
	old := reg.Snapshot().Revision()
	reg.Remove("t00029")
	_, err = e.ListTools(as("alice"), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: 10, PageToken: first.GetNextPageToken()})
	if CodeOf(err) != Aborted || !strings.Contains(err.Error(), old) || !strings.Contains(err.Error(), reg.Snapshot().Revision()) || !strings.Contains(err.Error(), "from the first page") {
		t.Errorf("a token of the revision before: %v, want Aborted naming both revisions", err)
	}
	for name, req := range map[string]*toolwirev1.ListToolsRequest{
		"not base64":         {PageToken: "!!!"},
		"not a token":        {PageToken: "aGVsbG8"},
		"another version":    {PageToken: strings.Replace(pageToken(old, "t00001"), "cDE", "cDI", 1)},
		"no name":            {PageToken: pageToken(old, "")},
		"too long":           {PageToken: pageToken(old, strings.Repeat("n", 600))},
		"negative page_size": {PageSize: -1},
	} {
		if _, err := e.ListTools(as("alice"), reg.Snapshot(), req); CodeOf(err) != InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

// TestSearchTools: the caller's permitted matches only, counted; the
// default, the cap and the bounds of max_results; a query search refuses is
// InvalidArgument; a new revision is searched as it is.
func TestSearchTools(t *testing.T) {
	t.Parallel()
	e, reg := newCatalog(t, Config{}, Deps{Admission: notEvery7th}, catalogTools(300, 10)...)
	search := func(caller string, req *toolwirev1.SearchToolsRequest) *toolwirev1.SearchToolsResponse {
		t.Helper()
		resp, err := e.SearchTools(as(caller), reg.Snapshot(), req)
		if err != nil {
			t.Fatalf("%v: %v", req, err)
		}
		return resp
	}
	// "t000" is in the names t00000 … t00099.
	if r := search("alice", &toolwirev1.SearchToolsRequest{Query: "T000"}); len(r.GetTools()) != DefaultSearchResults || r.GetTotalMatches() != 100 || r.GetRevision() != reg.Snapshot().Revision() {
		t.Errorf("default: %d tools of %d, revision %q", len(r.GetTools()), r.GetTotalMatches(), r.GetRevision())
	}
	if r := search("bob", &toolwirev1.SearchToolsRequest{Query: "t000", MaxResults: 1000}); len(r.GetTools()) != 85 || r.GetTotalMatches() != 85 {
		t.Errorf("bob: %d tools of %d, want the 85 he may call", len(r.GetTools()), r.GetTotalMatches())
	} else if slices := names(r.GetTools()); slices[0] != "t00001" || slices[6] != "t00008" {
		t.Errorf("bob's first tools %v", slices[:7])
	}
	if r := search("alice", &toolwirev1.SearchToolsRequest{Query: "tool", MaxResults: 1000}); len(r.GetTools()) != MaxSearchResults || r.GetTotalMatches() != 300 {
		t.Errorf("capped: %d tools of %d", len(r.GetTools()), r.GetTotalMatches())
	}
	if r := search("alice", &toolwirev1.SearchToolsRequest{Query: "t00042"}); len(r.GetTools()) != 1 || r.GetTools()[0].GetName() != "t00042" {
		t.Errorf("one name: %v", names(r.GetTools()))
	}
	if err := reg.Add(tools.Tool{Name: "zz_new", Description: "added later", Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	if r := search("alice", &toolwirev1.SearchToolsRequest{Query: "later"}); len(r.GetTools()) != 1 || r.GetRevision() != reg.Snapshot().Revision() {
		t.Errorf("after a change: %v at %q", names(r.GetTools()), r.GetRevision())
	}
	for name, req := range map[string]*toolwirev1.SearchToolsRequest{
		"empty":                 {},
		"spaces":                {Query: "  \t"},
		"too long":              {Query: strings.Repeat("q", 1025)},
		"negative max_results":  {Query: "tool", MaxResults: -1},
		"too many terms":        {Query: strings.Repeat("a b c d e f g h i j k ", 4) + strings.Repeat("l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 ", 2)},
		"an empty quoted query": {Query: `""`},
	} {
		_, err := e.SearchTools(as("alice"), reg.Snapshot(), req)
		if CodeOf(err) != InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

// TestSearchToolsBytes: an answer stays within MaxMessageBytes, its first
// tool aside, and still counts every match.
func TestSearchToolsBytes(t *testing.T) {
	t.Parallel()
	e, reg := newCatalog(t, Config{MaxMessageBytes: 256 << 10}, Deps{}, catalogTools(60, 20<<10)...)
	r, err := e.SearchTools(as("alice"), reg.Snapshot(), &toolwirev1.SearchToolsRequest{Query: "tool", MaxResults: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.GetTools()); n == 0 || n >= 60 || proto.Size(r) > 256<<10 || r.GetTotalMatches() != 60 {
		t.Errorf("%d tools, %d bytes, %d matches; want fewer than 60 within 256 KiB, and 60 matches", n, proto.Size(r), r.GetTotalMatches())
	}
}

// TestScansTakeTurns: listings and searches of a catalog of more than
// scanFree tools share scanSlots slots, a caller one at a time, and a
// request that finds none free within MaxQueueWait is ResourceExhausted.
// Unbounded, 32 searches of 32 terms over 40,000 tools held a real serve's
// two CPUs: ExecuteBatch calls beside them went from 54,258 in 8 s (p99
// 3.4 ms) to 28 (p50 1.1 s).
func TestScansTakeTurns(t *testing.T) {
	t.Parallel()
	inside, release := make(chan string), make(chan struct{})
	var first sync.Map // the callers whose first scan has been held
	held := admit{permitted: func(caller, tool string) bool {
		if _, again := first.LoadOrStore(caller, true); tool == "t00000" && strings.HasPrefix(caller, "slow") && !again {
			inside <- caller // the scan is under way, its slot taken
			<-release
		}
		return true
	}}
	e, reg := newCatalog(t, Config{MaxQueueWait: time.Millisecond}, Deps{Admission: held}, catalogTools(scanFree+1, 10)...)
	search := &toolwirev1.SearchToolsRequest{Query: "tool"}
	var wg sync.WaitGroup
	for i := range scanSlots() {
		wg.Go(func() {
			if _, err := e.SearchTools(as(fmt.Sprintf("slow%d", i)), reg.Snapshot(), search); err != nil {
				t.Errorf("a search that had its turn: %v", err)
			}
		})
		<-inside
	}
	for _, c := range []struct {
		name, caller, says string
		scan               func(ctx context.Context) error
	}{
		{"another caller's listing", "carol", "listings and searches", func(ctx context.Context) error {
			_, err := e.ListTools(ctx, reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: 10})
			return err
		}},
		{"another caller's search", "carol", "listings and searches", func(ctx context.Context) error {
			_, err := e.SearchTools(ctx, reg.Snapshot(), search)
			return err
		}},
		{"a second search of a caller whose first runs", "slow0", "this caller", func(ctx context.Context) error {
			_, err := e.SearchTools(ctx, reg.Snapshot(), search)
			return err
		}},
	} {
		if err := c.scan(as(c.caller)); CodeOf(err) != ResourceExhausted || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s while every scan slot is taken: %v; want ResourceExhausted saying %q", c.name, err, c.says)
		}
	}
	close(release)
	wg.Wait()
	if _, err := e.ListTools(as("carol"), reg.Snapshot(), &toolwirev1.ListToolsRequest{PageSize: 10}); err != nil {
		t.Errorf("a listing once the slots are free: %v", err)
	}

	// A catalog of scanFree tools is listed and searched without a slot.
	small, smallReg := newCatalog(t, Config{MaxQueueWait: time.Millisecond}, Deps{}, catalogTools(scanFree, 10)...)
	for range scanSlots() {
		cs, err := small.scans.Acquire(context.Background(), "", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer small.scans.Release(cs)
	}
	if _, err := small.SearchTools(as("carol"), smallReg.Snapshot(), search); err != nil {
		t.Errorf("a search of %d tools while every scan slot is taken: %v", scanFree, err)
	}
}
