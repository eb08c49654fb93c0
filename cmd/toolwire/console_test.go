package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// consoleConfig declares an HTTP tool whose description holds HTML (it must
// show as text) and whose input schema has nested objects, an array and an
// enum (the form must nest them). The tool is never called.
const consoleConfig = `http_tools:
  - name: evil
    description: "<img src=x onerror=\"document.title='pwned'\"> shown as text"
    url: http://127.0.0.1:9/never
    parameters:
      type: object
      properties:
        user:
          type: object
          properties:
            name: {type: string, description: the user's name}
            tags: {type: array, items: {type: string}}
            address:
              type: object
              properties:
                city: {type: string}
          required: [name]
        mode: {type: string, enum: [fast, slow]}
      required: [user]
approvers: [alice]
approve_own_calls: true
policies:
  - name: ask-first
    when: tool.name == "echo" && args.text == "ask"
    effect: require_approval
    message: a person says yes first
`

// browserWait bounds each wait for the page only so a broken test ends;
// nothing is timed.
const browserWait = 60 * time.Second

// TestConsoleInBrowser drives the web console in a real headless Chromium
// against "serve --diag --http-listen" with a token: the refusal of a
// wrong token, the tools, a nested form, a description shown as text, a
// batch built from forms and watched to its end with the right outcomes,
// a cancelled sleep, and the server page listing a running batch. It saves
// a screenshot of each page (TOOLWIRE_TEST_SCREENSHOTS names the folder;
// a temporary one otherwise) and checks each is a non-empty PNG.
func TestConsoleInBrowser(t *testing.T) {
	browser := testenv.LookPath(t, "chromium")
	tokens := writeFile(t, "tokens", "alice: token-of-alice-0123456789\n")
	config := writeFile(t, "toolwire.yaml", consoleConfig)
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--tokens-file", tokens, "--config", config)
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	shots := os.Getenv("TOOLWIRE_TEST_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	b := newBrowserTab(t, browser)
	ctx := b.ctx

	run := b.do
	until := b.until
	text := func(sel string) string { t.Helper(); return get(b, "read "+sel, chromedp.Text(chromedp.CSS(sel))) }
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	screenshot := func(name string) {
		t.Helper()
		img := get(b, "screenshot "+name, chromedp.FullScreenshot(100))
		if _, err := png.Decode(bytes.NewReader(img)); err != nil || len(img) < 1000 {
			t.Errorf("screenshot %s: %d bytes, %v; want a PNG", name, len(img), err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), img, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Without a token, and with a wrong one, the page says it was refused.
	// The first action starts the browser, which lives as long as that
	// action's context: this one, with no timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/console/")); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	until("the refusal without a token", `document.querySelector("#status").textContent.includes("Refused")`)
	firstRender := get(b, "read the first render's time", chromedp.Evaluate[float64](`performance.getEntriesByName("toolwire:first-render")[0].startTime`))
	t.Logf("first render (the server's first answer drawn) %.0f ms after navigation began", firstRender)
	run("sign in with a wrong token", chromedp.SendKeys(css("#token"), "not-a-token-at-all-0000"), chromedp.Click(css("#signin-button")))
	until("the refusal of a wrong token", `document.querySelector("#status").textContent.includes("Refused") && document.querySelector("#status").classList.contains("error")`)

	// With the right token: alice's tools, grouped by source.
	run("sign in", chromedp.SendKeys(css("#token"), "token-of-alice-0123456789"), chromedp.Click(css("#signin-button")))
	until("signed in as alice", `document.querySelector("#status").textContent.includes("Signed in as alice")`)
	for _, name := range []string{"echo", "sleep", "fail", "evil"} {
		until("the tool "+name, fmt.Sprintf(`!!document.querySelector('details.tool[data-name=%q]')`, name))
	}
	// The description's HTML is text: no img element, no script ran.
	run("open evil", chromedp.Click(css(`details.tool[data-name="evil"] summary`)))
	if got := text(`details.tool[data-name="evil"] .desc-text`); got != `<img src=x onerror="document.title='pwned'"> shown as text` {
		t.Errorf("evil's description shows as %q; want its text as it is", got)
	}
	imgs := get(b, "count images", chromedp.Evaluate[int](`document.querySelectorAll("#tool-list img").length`))
	title := get(b, "read the title", chromedp.Title())
	if imgs != 0 || title == "pwned" {
		t.Errorf("the description was rendered as HTML: %d images, title %q", imgs, title)
	}
	// Were a script of the page ever to hand text to an HTML sink, the
	// browser would refuse it (Trusted Types, no policy).
	for _, sink := range []string{`document.createElement("div").innerHTML = "<img src=x>"`, `document.body.insertAdjacentHTML("beforeend", "<b>x</b>")`, `document.createElement("script").src = "/x.js"`} {
		if got := get(b, "try an HTML sink", chromedp.Evaluate[string](`(() => { try { `+sink+`; return "allowed"; } catch (e) { return e.name; } })()`)); got != "TypeError" {
			t.Errorf("%s: %s; want a TypeError (Trusted Types)", sink, got)
		}
	}
	run("search", chromedp.SendKeys(css("#tool-search"), "slee"))
	until("the search narrows the list", `document.querySelectorAll("details.tool").length === 1 && !!document.querySelector('details.tool[data-name="sleep"]')`)
	_ = get(b, "clear the search", chromedp.Evaluate[bool](`(s => { s.value = ""; return s.dispatchEvent(new Event("input")); })(document.querySelector("#tool-search"))`))
	screenshot("tools")

	// A nested schema renders a nested form.
	run("try evil", chromedp.Click(css(`details.tool[data-name="evil"] summary`)), chromedp.Click(css(`details.tool[data-name="evil"] button.try`)))
	until("the nested form", `!!document.querySelector('#calls fieldset.nested input[data-path="user.name"]') && !!document.querySelector('#calls fieldset.nested fieldset.nested input[data-path="user.address.city"]') && !!document.querySelector('#calls select[data-path="mode"]')`)
	until("validation as you type", `document.querySelector("#calls .problems").textContent.includes("user.name is required")`)
	run("fill user.name", chromedp.SendKeys(css(`#calls input[data-path="user.name"]`), "Ada"))
	until("valid after typing", `document.querySelector("#calls .problems").textContent === "Arguments are valid." && JSON.parse(document.querySelector("#calls textarea.raw").value).user.name === "Ada"`)
	run("remove the call", chromedp.Click(css(`#calls button.remove`)))

	// A batch from the forms: three sleeps and one fail.
	add := func(tool string) {
		t.Helper()
		run("add "+tool, chromedp.SetValue(css("#add-tool"), tool), chromedp.Click(css("#add-call")))
	}
	for range 3 {
		add("sleep")
	}
	add("fail")
	for i := 1; i <= 3; i++ {
		run("fill a sleep", chromedp.SendKeys(css(fmt.Sprintf(`#calls > li:nth-child(%d) input[data-path="ms"]`, i)), "300"))
	}
	run("fill fail", chromedp.SendKeys(css(`#calls > li:nth-child(4) [data-path="message"]`), "broken on purpose"))
	until("a valid batch", `!document.querySelector("#run").disabled && [...document.querySelectorAll("#calls .problems")].every(p => p.textContent === "Arguments are valid.")`)
	screenshot("try")
	run("run the batch", chromedp.Click(css("#run")))
	until("BatchFinished", `document.querySelector("#batch-state").dataset.finished === "true"`)
	lanes := get(b, "read the timeline", chromedp.Evaluate[[]map[string]any](`[...document.querySelectorAll("#timeline .lane")].map(l => ({head: l.querySelector(".lane-head").textContent, states: [...l.querySelectorAll(".row")].map(r => r.dataset.state)}))`))
	if len(lanes) != 2 || fmt.Sprint(lanes[0]["states"]) != "[ok ok ok]" || fmt.Sprint(lanes[1]["states"]) != "[error]" {
		t.Errorf("timeline lanes %v; want one parallel lane of three ok sleeps, then the failed call", lanes)
	}
	if got := text(`#results .result[data-call-id="call_5"] h4`); !bytes.Contains([]byte(got), []byte("TOOL_ERROR")) {
		t.Errorf("the failed call's result heading %q; want TOOL_ERROR", got)
	}
	if got := text(`#results .result[data-call-id="call_5"] pre.text`); got != "broken on purpose" {
		t.Errorf("the failed call's text %q; want its message", got)
	}
	if got := text("#batch-state"); !bytes.Contains([]byte(got), []byte("3 succeeded, 1 failed")) {
		t.Errorf("the batch's summary %q; want 3 succeeded, 1 failed", got)
	}
	screenshot("watch")

	// A call a policy holds for approval: approved from the page, it runs.
	run("back to Try it for an approval", chromedp.Click(css("#nav-try")))
	for range 4 {
		run("remove a call", chromedp.Click(css(`#calls button.remove`)))
	}
	add("echo")
	run("fill echo", chromedp.SendKeys(css(`#calls [data-path="text"]`), "ask"), chromedp.Click(css("#run")))
	until("the call awaits approval", `document.querySelector('#timeline .row')?.dataset.state === "approval" && !!document.querySelector("#results .approval")`)
	if got := text("#results .approval .desc-text"); !strings.Contains(got, "a person says yes first") {
		t.Errorf("the approval's reason %q; want the policy's message", got)
	}
	screenshot("approval")
	run("approve", chromedp.Click(css(`#results .approval button`)))
	until("the approved call's result", `document.querySelector('#timeline .row')?.dataset.state === "ok" && document.querySelector("#batch-state").dataset.finished === "true" && !document.querySelector("#results .approval")`)
	if got := text("#results .result pre.text"); got != "ask" {
		t.Errorf("the approved echo's text %q; want ask", got)
	}

	// A long sleep: the server page lists it running; cancel ends it.
	run("back to Try it", chromedp.Click(css("#nav-try")))
	run("remove the echo", chromedp.Click(css(`#calls button.remove`)))
	add("sleep")
	run("fill a long sleep", chromedp.SendKeys(css(`#calls input[data-path="ms"]`), "600000"),
		chromedp.Click(css("#run")))
	until("the sleep runs", `document.querySelector('#timeline .row[data-state="running"]') !== null`)
	batchID := get(b, "read the batch ID", chromedp.Evaluate[string](`document.querySelector("#batch-state").textContent.match(/Batch (\S+) running/)[1]`))
	run("open the server page", chromedp.Click(css("#nav-server")))
	until("the running batch on the server page, its call running", fmt.Sprintf(`!!document.querySelector('#server-batches tr[data-batch-id=%q] li[data-call-id]')`, batchID))
	until("the sources", `!!document.querySelector('#server-sources tr[data-source="http_tools/evil"]')`)
	screenshot("server")
	run("cancel", chromedp.Click(css("#nav-watch")), chromedp.Click(css("#cancel")))
	until("the sleep cancelled", `document.querySelector("#timeline .row")?.dataset.state === "cancelled" && document.querySelector("#batch-state").dataset.finished === "true"`)
	run("open the server page again", chromedp.Click(css("#nav-server")))
	until("the finished batches of this session", `document.querySelectorAll("#finished li").length === 3`)

	// At a phone's width every page fits: nothing scrolls sideways.
	run("a phone's width", chromedp.EmulateViewport(390, 844))
	for _, page := range []string{"tools", "try", "watch", "server"} {
		run("open "+page, chromedp.Click(css("#nav-"+page)))
		until(page+" fits a phone's width", `document.documentElement.scrollWidth <= document.documentElement.clientWidth`)
	}
	screenshot("server-phone")
}

// browserTab runs actions in one tab of the test's browser, each bounded
// by browserWait so a broken page ends the test rather than hanging it.
type browserTab struct {
	t   *testing.T
	ctx context.Context
}

// newBrowserTab starts the browser at path (1280×800, a profile of the
// test's own, with more options if given) and opens a tab, both closed
// when the test ends.
func newBrowserTab(t *testing.T, path string, more ...chromedp.ExecAllocatorOption) *browserTab {
	opts := append(append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800), chromedp.UserDataDir(t.TempDir())), more...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	return &browserTab{t: t, ctx: ctx}
}

// fail ends the test with what the page shows.
func (b *browserTab) fail(what string, err error) {
	b.t.Helper()
	status, _ := chromedp.Run(b.ctx, chromedp.TextContent(chromedp.CSS("#status")))
	page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("main > section")].filter(s => !s.hidden).map(s => s.outerHTML).join("")`))
	b.t.Fatalf("%s: %v\nstatus line: %q\npage: %.3000s", what, err, status, page)
}

func (b *browserTab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

// until waits for a JavaScript expression to be true.
func (b *browserTab) until(what, expr string) {
	b.t.Helper()
	_ = get(b, what, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(browserWait)))
}

// get runs an action that returns a value.
func get[T any](b *browserTab, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait+5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// TestServeConsole: the console's page is on by default with
// --http-listen, open (its RPCs are what is authenticated), and
// --no-console turns it off.
func TestServeConsole(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: token-of-alice-0123456789\n")
	for _, c := range []struct {
		name   string
		args   []string
		status int
	}{
		{"on by default", nil, http.StatusOK},
		{"--no-console", []string{"--no-console"}, http.StatusNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startServe(t, append([]string{"--diag", "--http-listen", "127.0.0.1:0", "--tokens-file", tokens}, c.args...)...)
			var addr string
			waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
			resp, err := http.Get("http://" + addr + "/console/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Errorf("GET /console/: %s; want %d", resp.Status, c.status)
			}
			// The server view needs the token, as the ToolService does.
			resp, err = http.Post("http://"+addr+"/toolwire.v1.AdminService/GetServerStatus", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GetServerStatus without a token: %s; want 401", resp.Status)
			}
		})
	}
}

// TestConsoleImagesOutputAndContrast drives the console over tools the
// diagnostic ones cannot stand for: an MCP server's image
// (@modelcontextprotocol/server-everything's get-tiny-image) must be
// drawn, decoded, from its data; run_command's output must show while the
// command still runs; and every visible text must meet WCAG AA contrast
// (4.5:1, 3:1 for large text) against what is behind it, on every page.
func TestConsoleImagesOutputAndContrast(t *testing.T) {
	browser := testenv.LookPath(t, "chromium")
	everything, err := filepath.Abs("../../sources/mcpsource/testdata/everything/node_modules/.bin/mcp-server-everything")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(everything); err != nil {
		testenv.Missing(t, "@modelcontextprotocol/server-everything (npm ci in sources/mcpsource/testdata/everything)")
	}
	tokens := writeFile(t, "tokens", "alice: token-of-alice-0123456789\n")
	config := writeFile(t, "toolwire.yaml", "mcp_servers:\n  - name: ev\n    command: "+everything+"\n    args: [stdio]\n")
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--tokens-file", tokens, "--config", config,
		"--workspace", t.TempDir(), "--run-command", "--sandbox", "off")
	var addr string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	// The MCP server connects in the background (node starts it): the page
	// lists the tools it finds when it signs in, so wait for them first.
	// (A bound of its own, longer than waitFor's: node starts slowly on a
	// loaded machine.)
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(runCmd(t, s.addr, "tools", "--token", "token-of-alice-0123456789").stdout, "ev_get-tiny-image"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server's tools did not come within 2 minutes:\n%s", s.stderr.String())
		}
	}

	b := newBrowserTab(t, browser)
	ctx := b.ctx
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/console/")); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	b.do("sign in", chromedp.SendKeys(css("#token"), "token-of-alice-0123456789"), chromedp.Click(css("#signin-button")))
	b.until("the MCP server's tools", `!!document.querySelector('details.tool[data-name="ev_get-tiny-image"]')`)
	// Grouped by the source that serves them, as the server view says.
	b.until("a group of the MCP server ev", `[...document.querySelectorAll("#tool-list section.group")].some(g => g.querySelector("h3").textContent.startsWith("MCP server: ev") && !!g.querySelector('details.tool[data-name="ev_get-tiny-image"]'))`)
	b.until("a group of the built-in tools", `[...document.querySelectorAll("#tool-list section.group")].some(g => g.querySelector("h3").textContent.startsWith("Built-in") && !!g.querySelector('details.tool[data-name="run_command"]'))`)
	checkContrast(b, "tools")

	// An image result is drawn from its data.
	b.do("try the image", chromedp.Click(css("#nav-try")), chromedp.SetValue(css("#add-tool"), "ev_get-tiny-image"), chromedp.Click(css("#add-call")), chromedp.Click(css("#run")))
	b.until("the image, decoded", `(i => !!i && i.complete && i.naturalWidth > 0 && i.src.startsWith("data:image/png;base64,"))(document.querySelector("#results .result img"))`)
	checkContrast(b, "watch")

	// run_command's output shows while the command runs.
	b.do("back to Try it", chromedp.Click(css("#nav-try")), chromedp.Click(css(`#calls button.remove`)))
	b.do("add run_command", chromedp.SetValue(css("#add-tool"), "run_command"), chromedp.Click(css("#add-call")))
	_ = get(b, "type the arguments", chromedp.Evaluate[bool](`(r => { r.value = JSON.stringify({argv: ["sh", "-c", "echo first-line; sleep 2; echo second-line"]}); return r.dispatchEvent(new Event("input")); })(document.querySelector("#calls textarea.raw"))`))
	b.until("valid arguments", `!document.querySelector("#run").disabled`)
	b.do("run the command", chromedp.Click(css("#run")))
	b.until("output while the command runs", `document.querySelector('#timeline .row')?.dataset.state === "running" && document.querySelector("#timeline pre.output")?.textContent.includes("first-line")`)
	b.until("the command's end", `document.querySelector("#batch-state").dataset.finished === "true" && document.querySelector("#results .result pre.text")?.textContent.includes("second-line")`)
	b.until("the sandbox the command ran under", `[...document.querySelectorAll("#results .result h5")].some(h => h.textContent === "Sandbox" && h.nextElementSibling.textContent.includes('"mode": "off"'))`)

	// A call that reports progress shows a progress bar that moves.
	b.do("back to Try it for progress", chromedp.Click(css("#nav-try")), chromedp.Click(css(`#calls button.remove`)))
	b.do("add a sleep", chromedp.SetValue(css("#add-tool"), "sleep"), chromedp.Click(css("#add-call")),
		chromedp.SendKeys(css(`#calls input[data-path="ms"]`), "3000"), chromedp.Click(css("#run")))
	b.until("a progress bar part-way while the call runs", `(p => !!p && !p.hidden && p.value > 0 && p.value < p.max)(document.querySelector("#timeline progress")) && document.querySelector('#timeline .row').dataset.state === "running"`)
	b.until("the sleep's end", `document.querySelector("#batch-state").dataset.finished === "true"`)
	for _, page := range []string{"try", "server"} {
		b.do("open "+page, chromedp.Click(css("#nav-"+page)))
		checkContrast(b, page)
	}
}

// contrastJS finds the visible text whose contrast with what is behind it
// (the nearest opaque background up the tree) is below WCAG AA: 4.5:1, or
// 3:1 for large text (24px, or 18.66px bold). It returns a line for each.
const contrastJS = `(() => {
  const rgb = s => { const m = s.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(",").map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const bg = el => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c && c.a >= 0.9) return c; } return {r: 255, g: 255, b: 255, a: 1}; };
  const bad = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || !n.textContent.trim() || !el.getClientRects().length || el.closest("[hidden]")) continue;
    const st = getComputedStyle(el);
    if (st.visibility === "hidden" || Number(st.opacity) === 0) continue;
    const fg = rgb(st.color), b = bg(el);
    const l1 = lum(fg), l2 = lum(b);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(st.fontSize), large = size >= 24 || (size >= 18.66 && Number(st.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5)) bad.push(el.tagName.toLowerCase() + (el.className ? "." + el.className : "") + " " + JSON.stringify(n.textContent.trim().slice(0, 30)) + " " + ratio.toFixed(2) + ":1");
  }
  return bad;
})()`

// checkContrast fails the test for each text on the page below WCAG AA.
func checkContrast(b *browserTab, page string) {
	b.t.Helper()
	for _, line := range get(b, "check the contrast on "+page, chromedp.Evaluate[[]string](contrastJS)) {
		b.t.Errorf("%s: contrast below WCAG AA: %s", page, line)
	}
}
