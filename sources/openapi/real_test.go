package openapi

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
)

// docsVar names the folder of large public API documents that
// testdata/fetch-documents.sh fills (.ci/run sets it).
const docsVar = "TOOLWIRE_TEST_OPENAPI_DOCS"

// realDocs returns the folder of public documents, or skips (fails in CI)
// when there is none.
func realDocs(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv(docsVar)
	if dir == "" {
		testenv.Missing(tb, "the public API documents ("+docsVar+", filled by sources/openapi/testdata/fetch-documents.sh)")
	}
	return dir
}

// TestRealDocuments loads public API documents nobody on the project
// wrote, at pinned versions, and holds what each gives: how many of its
// operations become tools, and the reasons for the rest (all of them
// file uploads; Box's search is a tool without the optional filter whose
// values form style cannot carry). Then it calls a few tools of the three
// largest against a real server and checks the requests: GitHub's milestone cleared with null,
// Stripe's form bodies and deepObject queries, Kubernetes' */* bodies,
// and Box's query behind a path's fragment.
func TestRealDocuments(t *testing.T) {
	dir := realDocs(t)
	srv, got := recorder(t)
	regs := map[string]*tools.Registry{}
	for _, tc := range []struct {
		file   string
		counts Counts
		skips  string // the summary's skipped_because
	}{
		{"github.json", Counts{Operations: 1223, Tools: 1221, Skipped: 2}, `{"request_body":2}`},
		{"kubernetes.json", Counts{Operations: 1202, Tools: 1202}, ``},
		{"stripe.json", Counts{Operations: 452, Tools: 451, Skipped: 1}, `{"request_body":1}`},
		{"zoom.json", Counts{Operations: 373, Tools: 369, Skipped: 4}, `{"request_body":4}`},
		{"box.json", Counts{Operations: 260, Tools: 256, Skipped: 4}, `{"request_body":4}`},
		{"digitalocean.json", Counts{Operations: 290, Tools: 290}, ``},
		{"asana.json", Counts{Operations: 167, Tools: 166, Skipped: 1}, `{"request_body":1}`},
	} {
		src, reg, logs := newSource(t)
		cfg := Config{Name: "api", Spec: filepath.Join(dir, tc.file), BaseURL: srv.URL}
		if err := src.Sync(t.Context(), []Config{cfg}); err != nil {
			t.Fatal(err)
		}
		if got := src.Counts()["api"]; got != tc.counts {
			t.Errorf("%s: counts %+v; want %+v\n%s", tc.file, got, tc.counts, logs)
		}
		if tc.skips != "" && !strings.Contains(logs.String(), `"skipped_because":`+tc.skips) {
			t.Errorf("%s: the summary does not say %s:\n%s", tc.file, tc.skips, logs)
		}
		regs[tc.file] = reg
	}

	expect := func(file, name, args string, want request) {
		t.Helper()
		tl, ok := regs[file].Snapshot().Lookup(name)
		if !ok {
			t.Fatalf("no tool %s", name)
		}
		if _, err := tl.ValidateArguments(args); err != nil {
			t.Errorf("%s(%s): %v", name, args, err)
			return
		}
		// The server answers {}, which is no output schema's shape: the
		// answer is not checked here.
		if res, err := tl.Handler(t.Context(), tools.NewCall("c", name, []byte(args), nil)); err != nil || res.IsError {
			t.Errorf("%s: %v %v", name, res, err)
			return
		}
		if r := <-got; r != want {
			t.Errorf("%s sent %+v\nwant %+v", name, r, want)
		}
	}
	expect("github.json", "api_issues_update", `{"owner":"octo","repo":"hello","issue_number":1,"milestone":null}`,
		request{Method: "PATCH", URI: "/repos/octo/hello/issues/1", ContentType: "application/json", Body: `{"milestone":null}`})
	expect("github.json", "api_repos_get", `{"owner":"octo","repo":"hello"}`, request{Method: "GET", URI: "/repos/octo/hello"})
	expect("stripe.json", "api_PostCustomers", `{"email":"a@example.com","metadata":{"order":"6735"},"address":{"city":"Zürich"},"expand":["tax_ids"]}`,
		request{Method: "POST", URI: "/v1/customers", ContentType: "application/x-www-form-urlencoded",
			Body: "address%5Bcity%5D=Z%C3%BCrich&email=a%40example.com&expand%5B0%5D=tax_ids&metadata%5Border%5D=6735"})
	expect("stripe.json", "api_GetCustomers", `{"created":{"gte":1700000000},"limit":3}`,
		request{Method: "GET", URI: "/v1/customers?created%5Bgte%5D=1700000000&limit=3"})
	expect("box.json", "api_put_files_id_add_shared_link", `{"file_id":"12","fields":"shared_link","shared_link":{"access":"open"}}`,
		request{Method: "PUT", URI: "/files/12?fields=shared_link", ContentType: "application/json", Body: `{"shared_link":{"access":"open"}}`})
	expect("kubernetes.json", "api_createCoreV1Namespace", `{"metadata":{"name":"team-a"},"dryRun":"All"}`,
		request{Method: "POST", URI: "/api/v1/namespaces?dryRun=All", ContentType: "application/json", Body: `{"metadata":{"name":"team-a"}}`})
	expect("kubernetes.json", "api_patchCoreV1Namespace", `{"name":"team-a","body":{"metadata":{"labels":{"tier":"x"}}}}`,
		request{Method: "PATCH", URI: "/api/v1/namespaces/team-a", ContentType: "application/merge-patch+json", Body: `{"metadata":{"labels":{"tier":"x"}}}`})
}

// BenchmarkLoadGitHub measures loading GitHub's REST description (13 MB of
// JSON, 1,223 operations) from its file into tools: read, parse, derive
// schemas, compile the input schemas. heap-MB is what stays allocated
// once the tools are made.
func BenchmarkLoadGitHub(b *testing.B) {
	cfg := Config{Name: "gh", Spec: filepath.Join(realDocs(b), "github.json"), BaseURL: "http://127.0.0.1:9"}
	b.ReportAllocs()
	var ts []tools.Tool
	for b.Loop() {
		ts = nil
		var err error
		if ts, err = Load(b.Context(), cfg, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.ReportMetric(float64(len(ts)), "tools")
	b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "heap-MB")
}

// BenchmarkReloadUnchanged measures a reload of GitHub's document when
// neither it nor its entry changed: Check and Sync, as a SIGHUP runs them,
// which read the file and find what they built for it.
func BenchmarkReloadUnchanged(b *testing.B) {
	cfgs := []Config{{Name: "gh", Spec: filepath.Join(realDocs(b), "github.json"), BaseURL: "http://127.0.0.1:9"}}
	reg, err := tools.NewRegistry()
	if err != nil {
		b.Fatal(err)
	}
	src := New(reg, nil)
	defer src.Close()
	if err := src.Sync(b.Context(), cfgs); err != nil {
		b.Fatal(err)
	}
	rev := reg.Snapshot().Revision()
	b.ReportAllocs()
	for b.Loop() {
		if err := src.Check(b.Context(), cfgs); err != nil {
			b.Fatal(err)
		}
		if err := src.Sync(b.Context(), cfgs); err != nil {
			b.Fatal(err)
		}
	}
	if reg.Snapshot().Revision() != rev || reg.Snapshot().Len() != 1221 {
		b.Errorf("the reload changed the tools: %d tools", reg.Snapshot().Len())
	}
}
