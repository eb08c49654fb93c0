package main

import (
	"testing"

	"github.com/toolwire/toolwire/sources"
	"github.com/toolwire/toolwire/sources/openapi"
	"github.com/toolwire/toolwire/tools"
)

// TestSourceStatusSkipped: what the server view reports of an OpenAPI
// entry counts the operations its document gave no tool for (the
// Petstore's file upload), as AdminService's SourceStatus.skipped.
func TestSourceStatusSkipped(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	set := sources.New(reg, nil)
	defer set.Close()
	cfg := sources.Config{OpenAPI: []openapi.Config{{Name: "pets", Spec: "../../sources/openapi/testdata/petstore.yaml", BaseURL: "http://127.0.0.1:9"}}}
	if err := set.Sync(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	st := sourceStatus(set)()
	if len(st) != 1 || st[0].Kind != "openapi" || st[0].Skipped != 1 {
		t.Errorf("sourceStatus() = %+v; want the entry with one operation skipped", st)
	}
}
