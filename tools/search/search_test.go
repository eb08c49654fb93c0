package search

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/tools"
)

func nop(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }

// cases is testdata/cases.json: the reference cases.
type cases struct {
	Tools []struct {
		Name, Title, Description, Kind, Owner string
	}
	Queries []struct {
		Query string
		Limit int
		Want  []string
		Total int
		Error string
	}
}

func loadCases(t *testing.T) (cases, *tools.Snapshot) {
	t.Helper()
	b, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var c cases
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]tools.Source{"builtin": tools.SourceBuiltin, "http": tools.SourceHTTP, "mcp": tools.SourceMCP, "remote": tools.SourceRemote}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	byOwner := map[string][]tools.Tool{}
	for _, tl := range c.Tools {
		kind, ok := kinds[tl.Kind]
		if !ok {
			t.Fatalf("tool %s: kind %q", tl.Name, tl.Kind)
		}
		byOwner[tl.Owner] = append(byOwner[tl.Owner], tools.Tool{Name: tl.Name, Title: tl.Title, Description: tl.Description, Source: kind, Handler: nop})
	}
	for owner, ts := range byOwner {
		if owner == tools.Builtin {
			err = reg.Add(ts...)
		} else {
			_, err = reg.Source(owner).Set(ts...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return c, reg.Snapshot()
}

// TestCases: every reference case finds what it says, in its order, and
// counts every match.
func TestCases(t *testing.T) {
	t.Parallel()
	c, snap := loadCases(t)
	ix := NewIndex(snap)
	for _, tc := range c.Queries {
		q, err := Parse(tc.Query)
		if tc.Error != "" {
			if err == nil || !strings.Contains(err.Error(), tc.Error) {
				t.Errorf("Parse(%q) = %v, want an error saying %q", tc.Query, err, tc.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.Query, err)
			continue
		}
		limit := tc.Limit
		if limit == 0 {
			limit = 10
		}
		best, total := ix.Find(q, nil, limit)
		got := []string{}
		for _, i := range best {
			got = append(got, snap.Tools()[i].Name)
		}
		if diff := cmp.Diff(tc.Want, got); diff != "" || total != tc.Total {
			t.Errorf("Find(%q): total %d (want %d), names (-want +got):\n%s", tc.Query, total, tc.Total, diff)
		}
	}
}

// TestKeep: a tool keep refuses is neither returned nor counted.
func TestKeep(t *testing.T) {
	t.Parallel()
	_, snap := loadCases(t)
	q, err := Parse("github")
	if err != nil {
		t.Fatal(err)
	}
	best, total := NewIndex(snap).Find(q, func(tl *tools.Tool) bool { return !strings.HasPrefix(tl.Name, "pulls_") }, 10)
	var got []string
	for _, i := range best {
		got = append(got, snap.Tools()[i].Name)
	}
	if diff := cmp.Diff([]string{"issues_create", "repos_get", "repos_list_for_org"}, got); diff != "" || total != 3 {
		t.Errorf("total %d, names (-want +got):\n%s", total, diff)
	}
	if best, total := NewIndex(snap).Find(q, nil, 0); len(best) != 0 || total != 5 {
		t.Errorf("limit 0: %d tools, total %d; want none and 5", len(best), total)
	}
}

// TestParseBounds: a query over its bounds is refused, saying which.
func TestParseBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ query, want string }{
		{strings.Repeat("a", MaxQueryBytes+1), "over the limit of 1024"},
		{manyTerms(MaxTerms + 1), "more than 32 terms"},
		{"\xff", "not UTF-8"},
		{"\t\n ", "empty"},
	} {
		if _, err := Parse(tc.query); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.40q) = %v, want an error saying %q", tc.query, err, tc.want)
		}
	}
	// At the bounds, and repeated terms counted once.
	for _, ok := range []string{strings.Repeat("a", MaxQueryBytes), manyTerms(MaxTerms-1) + strings.Repeat(" w", 100)} {
		if _, err := Parse(ok); err != nil {
			t.Errorf("Parse(%.40q): %v", ok, err)
		}
	}
	q, _ := Parse(`Pull "Pull  Request" pull`)
	if diff := cmp.Diff([]string{"pull", "pull  request"}, q.Terms()); diff != "" {
		t.Errorf("terms (-want +got):\n%s", diff)
	}
}

// manyTerms is a query of n different terms.
func manyTerms(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "t%d ", i)
	}
	return b.String()
}
