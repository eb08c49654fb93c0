package engine

import (
	"log/slog"
	"sync"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/tools"
)

// benchCatalog is 10,000 GitHub-shaped tools, made once per test binary
// (registering them compiles 15,000 schemas: half a minute on a busy
// machine).
var benchCatalog = sync.OnceValues(func() (*tools.Registry, error) {
	reg, err := tools.NewRegistry()
	if err != nil {
		return nil, err
	}
	_, err = gencatalog.Register(reg, "github", gencatalog.Tools(10000))
	return reg, err
})

func benchEngine(b *testing.B) (*Engine, *tools.Snapshot) {
	b.Helper()
	reg, err := benchCatalog()
	if err != nil {
		b.Fatal(err)
	}
	// bob may call none of the tools whose names end in 7: a tenth.
	e := New(Config{}, Deps{Logger: slog.New(slog.DiscardHandler), Admission: admit{permitted: func(caller, tool string) bool {
		return caller != "bob" || tool[len(tool)-1] != '7'
	}}})
	b.Cleanup(e.Close)
	return e, reg.Snapshot()
}

// BenchmarkListTools: ListTools of 10,000 tools in process (no transport):
// every tool at once, and the ten pages of 1000 a client asks for.
func BenchmarkListTools(b *testing.B) {
	e, snap := benchEngine(b)
	ctx := as("alice")
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.ListTools(ctx, snap, &toolwirev1.ListToolsRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pages", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			token := ""
			for {
				page, err := e.ListTools(ctx, snap, &toolwirev1.ListToolsRequest{PageSize: 1000, PageToken: token})
				if err != nil {
					b.Fatal(err)
				}
				if token = page.GetNextPageToken(); token == "" {
					break
				}
			}
		}
	})
}

// BenchmarkSearchTools: SearchTools over 10,000 tools in process, as bob
// (whom a permission check filters), for a few kinds of query.
func BenchmarkSearchTools(b *testing.B) {
	e, snap := benchEngine(b)
	ctx := as("bob")
	for _, q := range []string{"pull request", "list repository secret", snap.Tools()[5000].Name, "github"} {
		b.Run(q, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.SearchTools(ctx, snap, &toolwirev1.SearchToolsRequest{Query: q}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
