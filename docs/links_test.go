package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// TestLinks checks that every relative link and image in README.md and
// docs/*.md points at a file or folder that exists and, when it names an
// anchor in a Markdown page, at a heading of that page.
func TestLinks(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 10 {
		t.Fatalf("docs/ holds %d pages, want the README's split topics", len(pages))
	}
	for _, p := range brokenLinks(t, append(pages, "../README.md")) {
		t.Error(p)
	}
}

// TestLinksCatchesBrokenOnes checks the checker itself on pages made to hold
// one good and two broken links, and a link in code that is not a link.
func TestLinksCatchesBrokenOnes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b := write("b.md", "# B\n\n## The `serve` command, again\n")
	a := write("a.md", "# A\n\nSee [b](b.md#the-serve-command-again), [gone](gone.md),\n"+
		"[no heading](b.md#nope) and `[in code](nowhere.md)`.\n")
	got := brokenLinks(t, []string{a, b})
	want := []string{
		a + `: link "gone.md": no such file`,
		a + `: link "b.md#nope": no heading "nope" in b.md`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestREADMEIsShort keeps the README a newcomer's first page; topics belong
// in docs/.
func TestREADMEIsShort(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the topic to a page in docs/", n)
	}
}

// brokenLinks returns one line per relative link in pages that leads nowhere.
func brokenLinks(t *testing.T, pages []string) []string {
	t.Helper()
	var problems []string
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		links, _ := parse(src)
		for _, link := range links {
			u, err := url.Parse(link)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: link %q: %v", page, link, err))
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // not a file of this repository
			}
			target := page
			if u.Path != "" {
				target = filepath.Join(filepath.Dir(page), u.Path)
			}
			if _, err := os.Stat(target); err != nil {
				problems = append(problems, fmt.Sprintf("%s: link %q: no such file", page, link))
				continue
			}
			if u.Fragment == "" || filepath.Ext(target) != ".md" {
				continue
			}
			targetSrc, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if _, anchors := parse(targetSrc); !anchors[u.Fragment] {
				problems = append(problems, fmt.Sprintf("%s: link %q: no heading %q in %s",
					page, link, u.Fragment, filepath.Base(target)))
			}
		}
	}
	return problems
}

// parse returns a Markdown page's link and image destinations, in order, and
// the anchors of its headings as GitHub makes them.
func parse(src []byte) (links []string, anchors map[string]bool) {
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	doc := md.Parser().Parse(text.NewReader(src))
	anchors = map[string]bool{}
	seen := map[string]int{}
	ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Link:
			links = append(links, string(n.Destination))
		case *ast.Image:
			links = append(links, string(n.Destination))
		case *ast.Heading:
			slug := githubSlug(plainText(n, src))
			if k := seen[slug]; k > 0 {
				anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				anchors[slug] = true
			}
			seen[slug]++
		}
		return ast.WalkContinue, nil
	})
	return links, anchors
}

// plainText is a node's text without markup (code spans keep their text).
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			switch c := c.(type) {
			case *ast.Text:
				b.Write(c.Segment.Value(src))
			case *ast.String:
				b.Write(c.Value)
			}
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// githubSlug makes a heading's anchor as GitHub does: lower case, without
// punctuation other than '-' and '_', spaces turned into '-'.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}
