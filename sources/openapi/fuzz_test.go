package openapi

import (
	"os"
	"testing"

	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/tools"
)

// FuzzOpenAPILoad: any document is a load error or tools that are valid:
// names OpenAI accepts, schemas the registry compiles. Never a panic. The
// seeds run with every go test; go test -fuzz FuzzOpenAPILoad explores.
func FuzzOpenAPILoad(f *testing.F) {
	for _, name := range []string{"testdata/petstore.yaml", "testdata/tricky.yaml", "testdata/swagger2.yaml", "testdata/operations.json"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"", "{}", "openapi: 3.1.0", "swagger: '2.0'\npaths: {/a: {get: {responses: {'200': {description: x}}}}}",
		`{"openapi":"3.0.0","info":{"title":"x","version":"1"},"paths":{"/a/{b}":{"get":{"parameters":[{"name":"b","in":"path","required":true,"schema":{"$ref":"#/components/schemas/S"}}],"responses":{"200":{"description":"x"}}}}},"components":{"schemas":{"S":{"allOf":[{"$ref":"#/components/schemas/S"}]}}}}`,
		"openapi: 3.0.0\ninfo: {title: x, version: '1'}\npaths:\n  /x:\n    post:\n      requestBody: {content: {application/json: {schema: {type: object, properties: {a: {type: object, additionalProperties: {$ref: '#/components/schemas/T'}}}}}}}\n      responses: {'200': {description: x}}\ncomponents: {schemas: {T: {type: object, properties: {t: {$ref: '#/components/schemas/T'}, u: {$ref: '#/components/schemas/T'}, v: {$ref: '#/components/schemas/T'}}}}}\n",
	} {
		f.Add([]byte(s))
	}
	send := &httpsource.Sender{}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := parse(data)
		if err != nil {
			return
		}
		ts, _, err := build(Config{Name: "f", BaseURL: "http://127.0.0.1:9"}, doc, send, listing.Default)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, tl := range ts {
			if !openAIName.MatchString(tl.Name) {
				t.Errorf("tool name %q is not a valid OpenAI function name", tl.Name)
			}
			if seen[tl.Name] {
				t.Errorf("tool name %q twice", tl.Name)
			}
			seen[tl.Name] = true
		}
		if _, err := tools.NewRegistry(ts...); err != nil {
			t.Errorf("the tools do not register: %v", err)
		}
	})
}

// BenchmarkLoadPetstore measures loading the Petstore document from its
// file into tools: read, parse, validate, derive schemas, compile them.
func BenchmarkLoadPetstore(b *testing.B) {
	cfg := Config{Name: "petstore", Spec: "testdata/petstore.yaml"}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		ts, err := Load(b.Context(), cfg, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		n = len(ts)
	}
	b.ReportMetric(float64(n), "tools")
}
