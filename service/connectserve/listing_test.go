package connectserve_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/surfacetest"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
)

// postJSON posts body to the procedure as curl does, gzip accepted or not,
// and returns the status, the Content-Encoding, the body's size on the wire
// and the body as JSON.
func postJSON(t *testing.T, url, procedure, body string, gzipped bool) (status int, encoding string, onWire int, out map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/toolwire.v1.ToolService/"+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice-token")
	if gzipped {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	// Without DisableCompression Go would ask for gzip and undo it unseen.
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain := raw
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if plain, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.Unmarshal(plain, &out); err != nil {
		t.Fatalf("%s: %s: %.200s", procedure, err, plain)
	}
	return resp.StatusCode, resp.Header.Get("Content-Encoding"), len(raw), out
}

// TestListToolsLargeCatalogJSON: a catalog larger than max_message_bytes
// lists over Connect's JSON, as curl sends it, with gzip and without (it
// was a 429 without); pages are pages; a page token of an earlier revision
// is a 409 "aborted".
func TestListToolsLargeCatalogJSON(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gencatalog.Register(reg, "github", gencatalog.Light(1500)); err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close)
	url := serveSurface(t, eng, reg, []surfacetest.Caller{{Name: "alice", Token: "alice-token"}}, httpserve.Config{})

	status, enc, plainBytes, all := postJSON(t, url, "ListTools", `{}`, false)
	if status != http.StatusOK || enc != "" || count(all) != 1500 || plainBytes < 5<<20 {
		t.Fatalf("every tool, no gzip: %d, encoding %q, %d bytes, %d tools", status, enc, plainBytes, count(all))
	}
	status, enc, zipped, again := postJSON(t, url, "ListTools", `{}`, true)
	if status != http.StatusOK || enc != "gzip" || zipped*3 > plainBytes || count(again) != 1500 {
		t.Errorf("every tool, gzip: %d, encoding %q, %d bytes of %d", status, enc, zipped, plainBytes)
	}

	status, _, _, page := postJSON(t, url, "ListTools", `{"pageSize":1000}`, true)
	token, _ := page["nextPageToken"].(string)
	if n := count(page); status != http.StatusOK || n == 0 || n > 1000 || token == "" || page["revision"] != all["revision"] {
		t.Fatalf("first page: %d, %d tools, token %q, revision %v", status, n, token, page["revision"])
	}
	reg.Remove("nothing") // no change: the token still holds
	if err := reg.Add(tools.Tool{Name: "added", Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	status, _, _, stale := postJSON(t, url, "ListTools", `{"pageSize":1000,"pageToken":"`+token+`"}`, false)
	if msg, _ := stale["message"].(string); status != http.StatusConflict || stale["code"] != "aborted" || !strings.Contains(msg, "from the first page") {
		t.Errorf("a page of the revision before: %d %v, want 409 aborted", status, stale)
	}

	// A small answer goes as it is, gzip accepted or not.
	status, enc, _, one := postJSON(t, url, "SearchTools", `{"query":"`+reg.Snapshot().Names()[0]+`","maxResults":1}`, true)
	if status != http.StatusOK || enc != "" || count(one) != 1 {
		t.Errorf("a search for one tool: %d, encoding %q, %d tools", status, enc, count(one))
	}
	status, _, _, found := postJSON(t, url, "SearchTools", `{"query":"github","maxResults":100}`, true)
	if status != http.StatusOK || count(found) != 100 || found["totalMatches"] != float64(1500) {
		t.Errorf("search: %d, %d tools of %v", status, count(found), found["totalMatches"])
	}
}

// count is how many tools a decoded response holds.
func count(resp map[string]any) int {
	ts, _ := resp["tools"].([]any)
	return len(ts)
}
