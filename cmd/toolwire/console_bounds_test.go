package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"google.golang.org/grpc/credentials/insecure"
)

// TestConsoleBoundsWhatItDraws drives the console in headless Chromium
// against a real serve whose tools and output another party controls, and
// holds what the page draws to its bounds, however much comes:
//
//   - an MCP server of 1,000 tools: the Tools page draws the first 200
//     rows, says how many the search found, and draws 200 more when asked;
//     a search draws from its first match again;
//   - run_command streaming about 2.4 MB of output: the page keeps the last
//     64 Ki characters (dom.js maxStreamed) and says how many came before;
//   - 105 batches in flight, one of them running 25 calls: the Server page
//     draws the oldest 100, and 20 running calls of each, and counts the
//     rest.
func TestConsoleBoundsWhatItDraws(t *testing.T) {
	t.Parallel()
	browser := testenv.LookPath(t, "chromium")
	const many = 1000
	m := mcp.NewServer(&mcp.Implementation{Name: "many"}, nil)
	for i := range many {
		m.AddTool(&mcp.Tool{Name: fmt.Sprintf("t%04d", i), Description: fmt.Sprintf("tool number %d", i), InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
	}
	web := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil))
	t.Cleanup(web.Close)
	config := writeFile(t, "toolwire.yaml", "mcp_servers:\n  - name: many\n    url: "+web.URL+"\n")
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--config", config,
		"--workspace", t.TempDir(), "--run-command", "--sandbox", "off", "--max-parallel", "32", "--call-timeout", "10m")
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	last := fmt.Sprintf("many_t%04d", many-1)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(runCmd(t, s.addr, "tools").stdout, last); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server's tools did not come within a minute:\n%s", s.stderr.String())
		}
	}

	b := newBrowserTab(t, browser)
	ctx := b.ctx
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/console/")); err != nil {
		t.Fatalf("open the console: %v", err)
	}

	// The Tools page: 200 rows of all, then 200 more when asked.
	total := many + 3 // and the diagnostic tools; run_command and the workspace's are counted below
	b.until("the tools listed", `document.querySelector("#tool-count").textContent.includes("(the first 200 shown)") && document.querySelectorAll("details.tool").length === 200 && !!document.querySelector("#more-tools")`)
	count := get(b, "read the count", chromedp.Evaluate[string](`document.querySelector("#tool-count").textContent`))
	var found, all int
	if _, err := fmt.Sscanf(count, "%d of %d tools (the first 200 shown)", &found, &all); err != nil || found != all || all < total {
		t.Errorf("the tool count reads %q; want all %d or more found, the first 200 shown", count, total)
	}
	groups := get(b, "read the groups", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tool-list section.group h3")].map(h => h.textContent)`))
	if !strings.Contains(strings.Join(groups, "|"), fmt.Sprintf("MCP server: many (%d)", many)) {
		t.Errorf("the groups read %q; want the MCP server's counting all its %d tools", groups, many)
	}
	b.do("show more", chromedp.Click(css("#more-tools")))
	b.until("400 rows", `document.querySelectorAll("details.tool").length === 400 && document.querySelector("#tool-count").textContent.includes("(the first 400 shown)")`)
	_ = get(b, "search", chromedp.Evaluate[bool](`(s => { s.value = "t0999"; return s.dispatchEvent(new Event("input")); })(document.querySelector("#tool-search"))`))
	b.until("one match, no more to show", `document.querySelectorAll("details.tool").length === 1 && !document.querySelector("#more-tools") && document.querySelector("#tool-count").textContent === "1 of `+fmt.Sprint(all)+` tools"`)
	_ = get(b, "clear the search", chromedp.Evaluate[bool](`(s => { s.value = ""; return s.dispatchEvent(new Event("input")); })(document.querySelector("#tool-search"))`))
	b.until("200 rows again", `document.querySelectorAll("details.tool").length === 200`)

	// The Server page: 105 detached batches of sleeps, the first of 25 calls.
	c, err := client.New(s.addr, client.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var ids []string
	t.Cleanup(func() {
		// Else serve's drain waits for them. One that has ended is not
		// found, which is as good.
		for _, id := range ids {
			_, _ = c.ToolService().CancelBatch(context.Background(), &toolwirev1.CancelBatchRequest{BatchId: id})
		}
	})
	detach := func(calls int) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel() // the batch is detached: it runs on
		req := &toolwirev1.ExecuteBatchRequest{Options: &toolwirev1.BatchOptions{Detach: true}}
		for i := range calls {
			req.Calls = append(req.Calls, client.Call(fmt.Sprintf("c%d", i), "sleep", map[string]any{"ms": 600_000}))
		}
		for ev, err := range c.ExecuteBatch(ctx, req) {
			if err != nil {
				t.Fatalf("a detached batch: %v", err)
			}
			if ev.GetAccepted() != nil {
				ids = append(ids, ev.GetAccepted().GetBatchId())
				return
			}
		}
	}
	detach(25)
	for range 104 {
		detach(1)
	}
	b.do("open the server page", chromedp.Click(css("#nav-server")))
	b.until("the oldest 100 batches drawn, the rest counted", `document.querySelectorAll("#server-batches tbody tr").length === 100 && document.querySelector("#server-batches-more")?.textContent === "The oldest 100 shown; 5 more not shown."`)
	b.until("20 running calls of the first batch drawn, the rest counted", `(r => r.querySelectorAll("li.mono").length === 20 && r.querySelector("li.more")?.textContent === "and 5 more")(document.querySelector("#server-batches tbody tr ul.running"))`)

	// A command's streamed output: 40 lines of 60,000 characters, 50 ms
	// apart (each line one chunk), then its last line.
	b.do("add run_command", chromedp.Click(css("#nav-try")), chromedp.SetValue(css("#add-tool"), "run_command"), chromedp.Click(css("#add-call")))
	_ = get(b, "type the arguments", chromedp.Evaluate[bool](`(r => { r.value = JSON.stringify({argv: ["sh", "-c", "for i in $(seq 40); do printf '%060000d\\n' $i; sleep 0.05; done; echo the-end"]}); return r.dispatchEvent(new Event("input")); })(document.querySelector("#calls textarea.raw"))`))
	b.until("valid arguments", `!document.querySelector("#run").disabled`)
	b.do("run the command", chromedp.Click(css("#run")))
	b.until("the command's end", `document.querySelector("#batch-state").dataset.finished === "true" && document.querySelector("#timeline pre.output")?.textContent.endsWith("the-end\n")`)
	out := get(b, "read the output", chromedp.Evaluate[map[string]any](`(o => ({length: o.length, head: o.slice(0, 100)}))(document.querySelector("#timeline pre.output").textContent)`))
	const kept = 64 << 10
	var dropped int
	if n := int(out["length"].(float64)); n > kept+100 {
		t.Errorf("the page holds %d characters of the command's output; want its last %d and a line saying how many came before", n, kept)
	} else if _, err := fmt.Sscanf(out["head"].(string), "[%d characters of output before these not shown]", &dropped); err != nil || dropped < kept {
		// Of the 2.4 million characters written, the server streams what
		// the page reads in time (run_command skips the oldest output
		// waiting for a slow reader, ending with the newest): on a loaded
		// machine, less than all of it, yet far more than the page keeps.
		t.Errorf("the output starts %q; want how many characters before it are not shown (more than it keeps)", out["head"])
	} else {
		t.Logf("of the command's output the page keeps %d characters, and says %d came before", n, dropped)
	}
}
