package sources

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/tools"
)

// BenchmarkSourceCall measures one call of an HTTP tool served by a Set:
// looked up in the registry's snapshot as the engine does, its handler run
// against a local server.
func BenchmarkSourceCall(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"data":{"items":[{"name":"widget"}]}}`)
	}))
	defer up.Close()
	b.Setenv("TW_BENCH_TOKEN", "t")
	reg, _ := tools.NewRegistry()
	set := New(reg, nil)
	defer set.Close()
	cfg := Config{HTTPTools: []httpsource.Spec{{
		Name: "get", Description: "d", URL: up.URL + "/items/{id}?q={q}",
		Headers:      map[string]string{"Authorization": "Bearer {{TW_BENCH_TOKEN}}"},
		Parameters:   []byte(`{"type":"object","properties":{"id":{"type":"string"},"q":{"type":"string"}}}`),
		ResponsePath: "data.items[0].name",
	}}}
	if err := set.Sync(context.Background(), cfg); err != nil {
		b.Fatal(err)
	}
	call := tools.NewCall("c", "get", []byte(`{"id":"a/b","q":"x y"}`), nil)
	b.ReportAllocs()
	for b.Loop() {
		t, ok := reg.Snapshot().Lookup("get")
		if !ok {
			b.Fatal("no tool get")
		}
		res, err := t.Handler(context.Background(), call)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}

// BenchmarkSync measures a reload's work for the sources: Check, then
// Sync, of a config of 100 HTTP tools, alternating between two configs so
// that every Sync changes the registry.
func BenchmarkSync(b *testing.B) {
	cfgs := [2]Config{}
	for i := range cfgs {
		for n := range 100 {
			cfgs[i].HTTPTools = append(cfgs[i].HTTPTools, httpsource.Spec{
				Name: fmt.Sprintf("t%d_%d", i, n), Description: "d", URL: "http://127.0.0.1:1/x/{id}",
				Parameters: []byte(`{"type":"object","properties":{"id":{"type":"string"}}}`),
			})
		}
	}
	reg, _ := tools.NewRegistry()
	set := New(reg, nil)
	defer set.Close()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		cfg := cfgs[i%2]
		i++
		if err := set.Check(b.Context(), cfg); err != nil {
			b.Fatal(err)
		}
		if err := set.Sync(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
}
