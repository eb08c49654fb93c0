package surfacetest

import (
	"context"
	"slices"
	"strings"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

// Lists is what a surface offers on the catalog beyond Tools: ListTools a
// page at a time, and SearchTools. A Surface whose adapter implements it
// runs the Lists subtests; one that does not (MCP's tools/list, whose page
// size is the server's, has its own tests) skips them.
type Lists interface {
	// ListPage lists one page of at most pageSize tools after token ("" for
	// the first) as caller: the response as the protocol carried it.
	ListPage(ctx context.Context, caller Caller, pageSize int32, token string) (*toolwirev1.ListToolsResponse, error)
	// Search runs SearchTools as caller.
	Search(ctx context.Context, caller Caller, query string, maxResults int32) (*toolwirev1.SearchToolsResponse, error)
}

func lists(t *testing.T, v *env) Lists {
	t.Helper()
	l, ok := v.s.(Lists)
	if !ok {
		t.Skip("the surface's adapter does not implement Lists")
	}
	return l
}

// listPages: pages of page_size tools, in name order, of one revision;
// together the caller's whole listing, which bob's lacks secret in; a page
// token the server did not give and a negative page_size are
// InvalidArgument.
func listPages(t *testing.T, v *env) {
	l := lists(t, v)
	ctx := context.Background()
	for _, c := range []Caller{alice, bob} {
		all, err := v.s.Tools(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, tl := range all {
			want = append(want, tl.GetName())
		}
		var got []string
		token, pages, rev := "", 0, ""
		for {
			page, err := l.ListPage(ctx, c, 3, token)
			if err != nil {
				t.Fatalf("%s's page %d: %v (%v)", c.Name, pages+1, err, v.s.Code(err))
			}
			pages++
			if n := len(page.GetTools()); n > 3 || (n < 3 && page.GetNextPageToken() != "") {
				t.Errorf("%s's page %d: %d tools, next token %q", c.Name, pages, n, page.GetNextPageToken())
			}
			if rev == "" {
				rev = page.GetRevision()
			} else if page.GetRevision() != rev {
				t.Errorf("%s's page %d of revision %q; the first was of %q", c.Name, pages, page.GetRevision(), rev)
			}
			for _, tl := range page.GetTools() {
				got = append(got, tl.GetName())
			}
			if token = page.GetNextPageToken(); token == "" || pages > len(want) {
				break
			}
		}
		if !slices.Equal(got, want) || pages != (len(want)+2)/3 {
			t.Errorf("%s's %d pages: %v; want %v in %d", c.Name, pages, got, want, (len(want)+2)/3)
		}
		if c == bob && slices.Contains(got, "secret") {
			t.Error("bob's pages list secret")
		}
	}
	for what, try := range map[string]func() error{
		"a page token the server never gave": func() error { _, err := l.ListPage(ctx, alice, 3, "bm90LWEtdG9rZW4"); return err },
		"a negative page_size":               func() error { _, err := l.ListPage(ctx, alice, -1, ""); return err },
	} {
		if err := try(); v.s.Code(err) != InvalidArgument {
			t.Errorf("%s: %v (%v), want InvalidArgument", what, err, v.s.Code(err))
		}
	}
}

// pagesOfOneRevision: once the tools change, the next page's token is
// Aborted, saying to list again; the listing then starts over at the new
// revision.
func pagesOfOneRevision(t *testing.T, v *env) {
	l := lists(t, v)
	ctx := context.Background()
	first, err := l.ListPage(ctx, alice, 3, "")
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, token %q", err, first.GetNextPageToken())
	}
	if err := v.reg.Add(tools.Tool{Name: "aaa_added", Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	_, err = l.ListPage(ctx, alice, 3, first.GetNextPageToken())
	if v.s.Code(err) != Aborted || !strings.Contains(err.Error(), "list them again from the first page") {
		t.Errorf("the next page after a change: %v (%v), want Aborted saying to list again", err, v.s.Code(err))
	}
	again, err := l.ListPage(ctx, alice, 3, "")
	if err != nil || again.GetRevision() == first.GetRevision() || again.GetTools()[0].GetName() != "aaa_added" {
		t.Errorf("the listing again: %v at %q (was %q), %v", again.GetTools(), again.GetRevision(), first.GetRevision(), err)
	}
}

// searchTools: the caller's matches, best first, counted; the revision;
// what bob may not call is neither found nor counted; an empty query is
// InvalidArgument.
func searchTools(t *testing.T, v *env) {
	l := lists(t, v)
	ctx := context.Background()
	r, err := l.Search(ctx, alice, "ECHO", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetTools()) == 0 || r.GetTools()[0].GetName() != "echo" || !strings.Contains(r.GetTools()[0].GetInputSchema(), `"text"`) || r.GetRevision() != v.reg.Snapshot().Revision() {
		t.Errorf("echo: %v at %q", r.GetTools(), r.GetRevision())
	}
	// "secret" is in the name of one tool only.
	for _, c := range []struct {
		caller Caller
		want   int32
	}{{alice, 1}, {bob, 0}} {
		r, err := l.Search(ctx, c.caller, "secret", 5)
		if err != nil || r.GetTotalMatches() != c.want || int32(len(r.GetTools())) != c.want {
			t.Errorf("secret as %s: %d tools of %d, %v; want %d", c.caller.Name, len(r.GetTools()), r.GetTotalMatches(), err, c.want)
		}
	}
	if all, err := l.Search(ctx, alice, "builtin", 2); err != nil || len(all.GetTools()) != 2 || all.GetTotalMatches() != int32(len(toolNames)) {
		t.Errorf("builtin, at most 2: %d tools of %d, %v; want 2 of %d", len(all.GetTools()), all.GetTotalMatches(), err, len(toolNames))
	}
	if _, err := l.Search(ctx, alice, "  ", 0); v.s.Code(err) != InvalidArgument {
		t.Errorf("an empty query: %v (%v), want InvalidArgument", err, v.s.Code(err))
	}
}
