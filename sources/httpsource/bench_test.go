package httpsource

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolwire/toolwire/tools"
	"sigs.k8s.io/yaml"
)

// BenchmarkCall measures one call of an HTTP tool (URL template, env-var
// header, request, response_path) against a local server; BenchmarkBareGet
// is the floor: the same request made directly with the same client.
func BenchmarkCall(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"data":{"items":[{"name":"widget"}]}}`)
	}))
	defer up.Close()
	b.Setenv("TW_BENCH_TOKEN", "t")
	var specs []Spec
	if err := yaml.Unmarshal([]byte(`
- name: get
  url: `+up.URL+`/items/{id}?q={q}
  headers: {Authorization: 'Bearer {{TW_BENCH_TOKEN}}'}
  parameters: {type: object, properties: {id: {type: string}, q: {type: string}}}
  response_path: data.items[0].name
`), &specs); err != nil {
		b.Fatal(err)
	}
	client := NewClient()
	defer client.CloseIdleConnections()
	ts, err := Tools(specs, client)
	if err != nil {
		b.Fatal(err)
	}
	call := tools.NewCall("c", "get", []byte(`{"id":"a/b","q":"x y"}`), nil)
	b.ReportAllocs()
	for b.Loop() {
		res, err := ts[0].Handler(context.Background(), call)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}

func BenchmarkBareGet(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"data":{"items":[{"name":"widget"}]}}`)
	}))
	defer up.Close()
	client := NewClient()
	defer client.CloseIdleConnections()
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", up.URL+"/items/a%2Fb?q=x+y", nil)
		req.Header.Set("Authorization", "Bearer t")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
}
