package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// catalogSize is how many generated operations the large catalog's
// OpenAPI document holds, beside its three special ones.
const catalogSize = 1200

// hostileMarkdown is a description that tries, every way Markdown and
// HTML offer, to run script or to lead somewhere other than an http(s)
// page; the console must show all of it as inert text.
const hostileMarkdown = "Hostile markdown\n\n" +
	"<script>window.__pwned = 'script'</script> and <img src=x onerror=\"window.__pwned='img'\">\n\n" +
	"[a javascript link](javascript:window.__pwned='link') [another](JaVaScRiPt:alert(1)) " +
	"[an encoded one](java&#115;cript:alert(1)) [data](data:text/html,<b>x</b>) <javascript:alert(1)>\n\n" +
	"&lt;script&gt;alert('entity')&lt;/script&gt; &amp;lt;b&amp;gt;\n\n" +
	"```\n<iframe src=\"javascript:alert(1)\"></iframe>\n```\n\n" +
	"[the only link](https://docs.example.com/safe)"

// catalogDocument is an OpenAPI 3.1 document of catalogSize generated
// operations in the manner of GitHub's (long operation IDs, summaries,
// Markdown descriptions with links, code and lists), and three more: one
// whose description is hostile, one whose body has a map, one whose body
// has a choice of shapes and a nested object whose legend is long.
func catalogDocument(server string) []byte {
	resources := []string{"repos", "issues", "pulls", "actions", "orgs", "teams", "gists", "checks", "codespaces", "dependabot", "packages", "projects"}
	verbs := []string{"list", "get", "create", "update", "delete", "get-all", "set", "remove", "add", "review"}
	nouns := []string{"deployment-branch-policies", "environment-secrets", "workflow-permissions", "repository-rulesets",
		"self-hosted-runners", "custom-properties-values", "webhook-deliveries", "team-memberships-for-user",
		"protected-branch-admin-enforcement", "code-scanning-default-setup-configuration"}
	methods := []string{"get", "post", "patch", "delete"}
	object := map[string]any{"type": "object"}
	ok := map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": object}}}}
	paths := map[string]any{}
	for i := range catalogSize {
		res, verb, noun := resources[i%len(resources)], verbs[i%len(verbs)], nouns[i%len(nouns)]
		summary := fmt.Sprintf("%s %s %d", strings.ToUpper(verb[:1])+verb[1:], strings.ReplaceAll(noun, "-", " "), i)
		if i%400 == 7 {
			summary = fmt.Sprintf("Rotate keystone credentials %d", i)
		}
		op := map[string]any{
			"operationId": fmt.Sprintf("%s/%s-%s-%d", res, verb, noun, i),
			"summary":     summary,
			"description": fmt.Sprintf("Works on the **%s** resource: `%s` it.\n\nSee the [API documentation](https://docs.example.com/rest/%s#op-%d), and page with `per_page`:\n\n- up to *100* items a page\n- sorted by `created_at`", res, verb, res, i),
			"parameters": []any{
				map[string]any{"name": "owner", "in": "path", "required": true, "description": "The account owner. The name is **not** case sensitive.", "schema": map[string]any{"type": "string"}},
				map[string]any{"name": "per_page", "in": "query", "description": "The number of results per page (max 100).", "schema": map[string]any{"type": "integer", "maximum": 100}},
			},
			"responses": ok,
		}
		method := methods[i%len(methods)]
		if method == "post" || method == "patch" {
			op["requestBody"] = map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{
				"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "description": "The name."}},
			}}}}
		}
		paths[fmt.Sprintf("/%s/%d/%s/{owner}", res, i, noun)] = map[string]any{method: op}
	}
	paths["/hostile"] = map[string]any{"get": map[string]any{"operationId": "markdown/hostile", "description": hostileMarkdown, "responses": ok}}
	paths["/labels/{id}"] = map[string]any{"post": map[string]any{
		"operationId": "labels/set", "summary": "Set an issue's labels",
		"parameters": []any{map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "integer"}}},
		"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{
			"type": "object", "required": []any{"labels"},
			"properties": map[string]any{
				"labels": map[string]any{"type": "object", "description": "Each label's name and its colour.", "additionalProperties": map[string]any{"type": "string"}},
				"note":   map[string]any{"type": "string"},
			},
		}}}},
		"responses": ok,
	}}
	paths["/widgets/{id}"] = map[string]any{"patch": map[string]any{
		"operationId": "widgets/update", "summary": "Update a widget",
		"parameters": []any{map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "integer"}}},
		"requestBody": map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"shape": map[string]any{"description": "The widget's outline.", "oneOf": []any{
					map[string]any{"title": "Circle", "type": "object", "properties": map[string]any{"radius": map[string]any{"type": "number"}}, "required": []any{"radius"}},
					map[string]any{"title": "Square", "type": "object", "properties": map[string]any{"side": map[string]any{"type": "number"}}, "required": []any{"side"}},
				}},
				"a_nested_object_whose_name_is_long_enough_to_wrap_on_a_phone": map[string]any{
					"type": "object", "description": "A nested object with a long name, whose legend takes more than one line at a phone's width.",
					"properties": map[string]any{"colour": map[string]any{"type": "string"}},
				},
			},
		}}}},
		"responses": ok,
	}}
	doc, err := json.Marshal(map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "A large catalog", "version": "1"},
		"servers": []any{map[string]any{"url": server}},
		"paths":   paths,
	})
	if err != nil {
		panic(err)
	}
	return doc
}

// upstream is the HTTP server behind the catalog's tools: it serves the
// document and records every other request it gets.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	requests map[string][]byte // "METHOD /path" → the body
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{requests: map[string][]byte{}}
	var doc []byte
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/openapi.json" {
			w.Write(doc)
			return
		}
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.requests[r.Method+" "+r.URL.Path] = body
		u.mu.Unlock()
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(u.Close)
	doc = catalogDocument(u.URL)
	return u
}

// body is the JSON body of the request route got, decoded.
func (u *upstream) body(t *testing.T, route string) any {
	t.Helper()
	u.mu.Lock()
	b, ok := u.requests[route]
	u.mu.Unlock()
	var v any
	if !ok || json.Unmarshal(b, &v) != nil {
		t.Fatalf("the upstream got %s with the body %q (received: %t); want JSON", route, b, ok)
	}
	return v
}

// TestConsoleLargeCatalog drives the console in Chromium over a catalog
// of more than a thousand tools from an OpenAPI document (served by a real
// HTTP server and loaded by the openapi source) and the input schema of
// CEL's Eval as gRPC reflection describes it ($defs, recursive messages,
// oneofs, maps): every row shows its summary; the search matches words in
// names, titles, descriptions and sources, and the add-call picker finds
// with the same matching; descriptions are Markdown drawn as DOM nodes,
// hostile ones inert; the Eval form draws one branch at a time and
// references when asked, and what it builds is what the upstream gets; a
// map field is a key/value editor; legends are never struck through; a
// running call's bar shows the time it has used of its timeout; times are
// local with milliseconds and how long ago; and every page fits a phone's
// width. Screenshots of each page at both widths go to
// TOOLWIRE_TEST_SCREENSHOTS (or a temporary folder).
func TestConsoleLargeCatalog(t *testing.T) {
	browser := testenv.LookPath(t, "chromium")
	up := newUpstream(t)
	celSchema, err := os.ReadFile("../../service/console/testdata/cel-eval.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, celSchema); err != nil {
		t.Fatal(err)
	}
	config := writeFile(t, "toolwire.yaml", fmt.Sprintf(`openapi:
  - name: big
    spec: %[1]s/openapi.json
    base_url: %[1]s
http_tools:
  - name: cel_eval
    title: Evaluate a CEL expression
    description: "Evaluates a parsed or checked CEL expression, as the CEL conformance service's Eval does."
    method: POST
    url: %[1]s/cel
    parameters: %[2]s
`, up.URL, compact.String()))
	s := startServe(t, "--diag", "--http-listen", "127.0.0.1:0", "--config", config)
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
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	eval := func(what, js string) any { t.Helper(); return get(b, what, chromedp.Evaluate[any](js)) }
	text := func(sel string) string { t.Helper(); return get(b, "read "+sel, chromedp.Text(chromedp.CSS(sel))) }
	// jsSet types value into the field sel names, as a person would (an
	// input event), without depending on where the field is scrolled.
	jsSet := func(sel, value string) {
		t.Helper()
		if !get(b, "type into "+sel, chromedp.Evaluate[bool](fmt.Sprintf(`(e => { if (!e) return false; e.value = %q; return e.dispatchEvent(new Event("input", {bubbles: true})); })(document.querySelector(%q))`, value, sel))) {
			b.fail("type into "+sel, fmt.Errorf("no such field"))
		}
	}
	choose := func(sel, value string) {
		t.Helper()
		if !get(b, "choose in "+sel, chromedp.Evaluate[bool](fmt.Sprintf(`(e => { if (!e) return false; const o = [...e.options].find(o => o.textContent === %[1]q || o.value === %[1]q); if (!o) return false; e.value = o.value; return e.dispatchEvent(new Event("change", {bubbles: true})); })(document.querySelector(%[2]q))`, value, sel))) {
			b.fail("choose "+value+" in "+sel, fmt.Errorf("no such select or option"))
		}
	}
	click := func(sel string) {
		t.Helper()
		if !get(b, "click "+sel, chromedp.Evaluate[bool](fmt.Sprintf(`(e => { if (!e) return false; e.click(); return true; })(document.querySelector(%q))`, sel))) {
			b.fail("click "+sel, fmt.Errorf("no such element"))
		}
	}
	// screenshot saves the whole page, or only what the viewport shows of
	// the Tools page (a thousand rows make too tall an image).
	screenshot := func(name string) {
		t.Helper()
		shot := chromedp.FullScreenshot(100)
		if strings.Contains(name, "tools") {
			shot = chromedp.CaptureScreenshot()
		}
		img := get(b, "screenshot "+name, shot)
		if _, err := png.Decode(bytes.NewReader(img)); err != nil || len(img) < 1000 {
			t.Errorf("screenshot %s: %d bytes, %v; want a PNG", name, len(img), err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// fits holds the page to the viewport's width and every legend clear
	// of its fieldset's border.
	fits := func(where string) {
		t.Helper()
		b.until(where+": nothing wider than the viewport", `document.documentElement.scrollWidth <= document.documentElement.clientWidth`)
		struck := get(b, where+": legends", chromedp.Evaluate[[]string](`[...document.querySelectorAll("fieldset > legend")].filter(l => l.getClientRects().length).filter(l => {
			const f = l.parentElement.getBoundingClientRect(), r = l.getBoundingClientRect();
			return r.top < f.top + parseFloat(getComputedStyle(l.parentElement).borderTopWidth) - 0.5;
		}).map(l => l.textContent)`))
		if len(struck) > 0 {
			t.Errorf("%s: legends the fieldset's border runs through: %q", where, struck)
		}
	}

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/console/")); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	// The first 200 rows are drawn, then 200 more each time it is asked.
	b.until("the catalog listed", `/^\d+ of \d+ tools \(the first 200 shown\)$/.test(document.querySelector("#tool-count").textContent) && document.querySelectorAll("details.tool").length === 200`)
	firstRender := get(b, "read the first render's time", chromedp.Evaluate[float64](`performance.getEntriesByName("toolwire:first-render")[0].startTime`))
	for get(b, "more to show", chromedp.Evaluate[bool](`!!document.querySelector("#more-tools")`)) {
		click("#more-tools")
	}
	b.until("every row drawn", `/^\d+ of \d+ tools$/.test(document.querySelector("#tool-count").textContent) && document.querySelectorAll("details.tool").length > 1200`)
	total := get(b, "count the tools", chromedp.Evaluate[int](`document.querySelectorAll("details.tool").length`))
	t.Logf("%d tools; first render (the tools drawn) %.0f ms after navigation began", total, firstRender)
	if bigs := get(b, "count the catalog's tools", chromedp.Evaluate[int](`document.querySelectorAll('details.tool[data-name^="big_"]').length`)); bigs != catalogSize+3 {
		t.Errorf("%d of the document's tools listed; want %d", bigs, catalogSize+3)
	}

	// Every OpenAPI row shows its operation's summary.
	if n := get(b, "rows without a summary", chromedp.Evaluate[[]string](`[...document.querySelectorAll('details.tool[data-name^="big_"]')].filter(d => !d.querySelector(".ttitle")?.textContent).map(d => d.dataset.name)`)); len(n) > 0 {
		t.Errorf("%d OpenAPI rows show no summary, as %q", len(n), n[:min(len(n), 3)])
	}
	if got := text(`details.tool[data-name="big_repos_list-deployment-branch-policies-0"] .ttitle`); got != "List deployment branch policies 0" {
		t.Errorf("a row's summary reads %q; want the operation's summary", got)
	}

	// The search: every word somewhere in a name, title, description or
	// source.
	search := func(q string) {
		t.Helper()
		jsSet("#tool-search", q)
	}
	search("rotate keystone")
	if got := eval("the search's matches", `[...document.querySelectorAll("details.tool")].map(d => d.dataset.name).sort()`); fmt.Sprint(got) != "[big_actions_remove-team-memberships-for-user-807 big_checks_remove-team-memberships-for-user-7 big_projects_remove-team-memberships-for-user-407]" {
		t.Errorf(`"rotate keystone" finds %v; want the three operations whose summary has both words`, got)
	}
	search("builtin sleep")
	if got := eval("a search by source", `[...document.querySelectorAll("details.tool")].map(d => d.dataset.name)`); fmt.Sprint(got) != "[sleep]" {
		t.Errorf(`"builtin sleep" finds %v; want sleep, a built-in tool whose name, title and description do not say "builtin"`, got)
	}
	search(`openapi:big "rotate keystone"`)
	if got := get(b, "a search by owner and phrase", chromedp.Evaluate[int](`document.querySelectorAll("details.tool").length`)); got != 3 {
		t.Errorf(`'openapi:big "rotate keystone"' finds %d tools; want the three of the document whose summary has the phrase`, got)
	}

	// Descriptions are Markdown, drawn as elements.
	search("list deployment branch policies 0")
	click(`details.tool[data-name="big_repos_list-deployment-branch-policies-0"] summary`)
	md := eval("the description's elements", `(d => ({strong: d.querySelectorAll("strong").length, code: d.querySelectorAll("code").length, items: d.querySelectorAll("ul > li").length, em: d.querySelectorAll("em").length,
		links: [...d.querySelectorAll("a")].map(a => a.getAttribute("href") + " " + a.rel + " " + a.textContent)}))(document.querySelector('details.tool[data-name="big_repos_list-deployment-branch-policies-0"] .desc-text'))`)
	if diff := cmp.Diff(map[string]any{"strong": 1.0, "code": 3.0, "items": 2.0, "em": 1.0,
		"links": []any{"https://docs.example.com/rest/repos#op-0 noopener noreferrer API documentation"}}, md); diff != "" {
		t.Errorf("the Markdown description drawn (-want +got):\n%s", diff)
	}
	// A hostile description stays text: no element it names exists, no
	// link leads anywhere but its one https page, nothing ran.
	search("hostile")
	click(`details.tool[data-name="big_markdown_hostile"] summary`)
	hostile := eval("the hostile description", `(d => ({elements: d.querySelectorAll("script, img, iframe, b").length, links: [...d.querySelectorAll("a")].map(a => a.href),
		pwned: String(window.__pwned), text: d.textContent.includes("<script>window.__pwned = 'script'</script>") && d.textContent.includes("<script>alert('entity')</script>") && d.textContent.includes("&lt;b&gt;")}))(document.querySelector('details.tool[data-name="big_markdown_hostile"] .desc-text'))`)
	if diff := cmp.Diff(map[string]any{"elements": 0.0, "links": []any{"https://docs.example.com/safe"}, "pwned": "undefined", "text": true}, hostile); diff != "" {
		t.Errorf("the hostile description (-want +got):\n%s", diff)
	}
	checkContrast(b, "tools with Markdown")
	screenshot("catalog-tools")
	search("")

	// The add-call picker: the same matching, keyboard and all.
	b.do("open Try it", chromedp.Click(css("#nav-try")))
	b.do("search the picker", chromedp.Click(css("#add-tool")), chromedp.SendKeys(css("#add-tool"), "rotate keystone"))
	b.until("the picker's matches", `document.querySelectorAll("#page-try .bar.add .picker-pop:not([hidden]) li[role=option]").length === 3`)
	options := eval("the picker's options", `[...document.querySelectorAll("#page-try .bar.add .picker-pop li[role=option]")].map(o => [o.querySelector(".pname").textContent, o.querySelector(".psum").textContent, o.querySelector(".psrc").textContent].join(" | "))`)
	if diff := cmp.Diff([]any{
		"big_actions_remove-team-memberships-for-user-807 | Rotate keystone credentials 807 | OpenAPI: big",
		"big_checks_remove-team-memberships-for-user-7 | Rotate keystone credentials 7 | OpenAPI: big",
		"big_projects_remove-team-memberships-for-user-407 | Rotate keystone credentials 407 | OpenAPI: big",
	}, options); diff != "" {
		t.Errorf("the picker's options (-want +got):\n%s", diff)
	}
	checkContrast(b, "the picker")
	b.do("pick the second with the keyboard", chromedp.KeyEvent(kb.ArrowDown), chromedp.KeyEvent(kb.Enter))
	b.until("the picked tool's call", `document.querySelector("#calls li.call")?.dataset.tool === "big_checks_remove-team-memberships-for-user-7" && document.querySelector("#add-tool").getAttribute("aria-expanded") === "false"`)
	click(`#calls button.remove`)
	jsSet("#add-tool", "no such words anywhere")
	b.until("no match said", `document.querySelector("#page-try .bar.add .picker-more").textContent === "No tool matches."`)
	// A broad query lists the first matches and says how many there are.
	jsSet("#add-tool", "list")
	b.until("a bounded list", `document.querySelectorAll("#page-try .bar.add .picker-pop li[role=option]").length === 50 && /^50 of \d+ matches shown/.test(document.querySelector("#page-try .bar.add .picker-more").textContent)`)
	b.do("close the picker", chromedp.KeyEvent(kb.Escape))

	// CEL's Eval: one branch at a time, references drawn when asked.
	jsSet("#add-tool", "cel eval")
	click("#add-call")
	card := `#calls li.call[data-tool="cel_eval"]`
	b.until("the Eval form", `!!document.querySelector('`+card+` select.oneof[data-oneof="checkedExpr,parsedExpr"]')`)
	controls := get(b, "count the Eval form's controls", chromedp.Evaluate[int](`document.querySelectorAll('`+card+` .form :is(input, select, textarea, button)').length`))
	if controls != 3 {
		t.Errorf("the Eval form starts with %d controls; want 3: the oneof's select, container and the bindings' add button", controls)
	}
	choose(card+` select.oneof[data-oneof="checkedExpr,parsedExpr"]`, "checkedExpr")
	choose(card+` select.oneof[data-oneof="checkedExpr,parsedExpr"]`, "parsedExpr")
	b.until("parsedExpr alone", `JSON.stringify(JSON.parse(document.querySelector('`+card+` textarea.raw').value)) === '{"parsedExpr":{}}'`)
	click(card + ` button.set[data-path="parsedExpr.expr"]`)
	choose(card+` select.oneof[data-path^="parsedExpr.expr.callExpr|"]`, "callExpr")
	jsSet(card+` input[data-path="parsedExpr.expr.callExpr.function"]`, "_+_")
	jsSet(card+` input[data-path="parsedExpr.expr.id"]`, "1")
	for i := range 2 {
		click(card + ` button[data-path="parsedExpr.expr.callExpr.args"]`)
		item := fmt.Sprintf("parsedExpr.expr.callExpr.args[%d]", i)
		choose(card+` select.oneof[data-path^="`+item+`.callExpr|"]`, "constExpr")
		choose(card+` select.oneof[data-path^="`+item+`.constExpr.boolValue|"]`, "int64Value")
		jsSet(card+` input[data-path="`+item+`.constExpr.int64Value"]`, fmt.Sprint(i+1))
	}
	// A map of messages: an entry's value is a message with its own oneof.
	click(card + ` button.add-entry[data-path="bindings"]`)
	jsSet(card+` .map input.map-key`, "x")
	choose(card+` select.oneof[data-path^="bindings.x.error|"]`, "value")
	choose(card+` select.oneof[data-path^="bindings.x.value.boolValue|"]`, "stringValue")
	jsSet(card+` input[data-path="bindings.x.value.stringValue"]`, "five")
	want := map[string]any{
		"parsedExpr": map[string]any{"expr": map[string]any{"id": "1", "callExpr": map[string]any{"function": "_+_", "args": []any{
			map[string]any{"constExpr": map[string]any{"int64Value": "1"}},
			map[string]any{"constExpr": map[string]any{"int64Value": "2"}},
		}}}},
		"bindings": map[string]any{"x": map[string]any{"value": map[string]any{"stringValue": "five"}}},
	}
	b.until("valid Eval arguments", `document.querySelector('`+card+` .problems').textContent === "Arguments are valid."`)
	var gotArgs any
	if err := json.Unmarshal([]byte(get(b, "read the JSON", chromedp.Evaluate[string](`document.querySelector('`+card+` textarea.raw').value`))), &gotArgs); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, gotArgs); diff != "" {
		t.Errorf("the Eval arguments built from the form (-want +got):\n%s", diff)
	}
	// Setting a second field of a oneof is refused by the validator.
	jsSet(card+` textarea.raw`, `{"parsedExpr": {}, "checkedExpr": {}}`)
	b.until("the oneof's conflict named", `document.querySelector('`+card+` .problems').textContent.includes("cannot be set together with")`)
	jsSet(card+` textarea.raw`, string(must(json.Marshal(want))))
	b.until("valid again, the form drawn from the JSON", `document.querySelector('`+card+` .problems').textContent === "Arguments are valid." && !!document.querySelector('`+card+` input[data-path="parsedExpr.expr.callExpr.args[1].constExpr.int64Value"]')`)
	height := get(b, "the Eval card's height", chromedp.Evaluate[float64](`document.querySelector('`+card+`').getBoundingClientRect().height`))
	t.Logf("the Eval form, filled: %d controls, the card %.0f px high", get(b, "count", chromedp.Evaluate[int](`document.querySelectorAll('`+card+` .form :is(input, select, textarea, button)').length`)), height)

	// A map field is a key/value editor, and the upstream gets the map.
	jsSet("#add-tool", "big_labels_set")
	click("#add-call")
	lcard := `#calls li.call[data-tool="big_labels_set"]`
	b.until("the labels form", `!!document.querySelector('`+lcard+` .map button.add-entry')`)
	if got := text(lcard + " .form"); strings.Contains(got, "takes no arguments") || strings.Contains(got, "names no arguments") {
		t.Errorf("the map field's form says %q", got)
	}
	jsSet(lcard+` input[data-path="id"]`, "42")
	for i, kv := range [][2]string{{"bug", "d73a4a"}, {"help wanted", "008672"}} {
		click(lcard + ` .map button.add-entry`)
		jsSet(fmt.Sprintf(`%s .map li.entry:nth-child(%d) input.map-key`, lcard, i+1), kv[0])
		jsSet(fmt.Sprintf(`%s .map li.entry:nth-child(%d) .map-value input`, lcard, i+1), kv[1])
	}
	b.until("valid labels", `document.querySelector('`+lcard+` .problems').textContent === "Arguments are valid."`)

	// A choice of shapes draws the branch chosen.
	jsSet("#add-tool", "big_widgets_update")
	click("#add-call")
	wcard := `#calls li.call[data-tool="big_widgets_update"]`
	b.until("the widgets form", `!!document.querySelector('`+wcard+` select.branch')`)
	jsSet(wcard+` input[data-path="id"]`, "7")
	choose(wcard+` select.branch`, "Square")
	jsSet(wcard+` input[data-path$="side"]`, "3")
	b.until("one branch drawn", `!document.querySelector('`+wcard+` input[data-path$="radius"]') && document.querySelector('`+wcard+` .problems').textContent === "Arguments are valid."`)
	fits("try, desktop")
	screenshot("catalog-try")

	// Run the three: the upstream gets what the forms built.
	b.do("run", chromedp.Click(css("#run")))
	b.until("BatchFinished", `document.querySelector("#batch-state").dataset.finished === "true"`)
	if got := text("#batch-state"); !strings.Contains(got, "3 succeeded") {
		t.Errorf("the batch: %q; want 3 succeeded", got)
	}
	if diff := cmp.Diff(want, up.body(t, "POST /cel")); diff != "" {
		t.Errorf("the Eval request the upstream got (-want +got):\n%s", diff)
	}
	if got := up.body(t, "POST /labels/42"); !cmp.Equal(got.(map[string]any)["labels"], map[string]any{"bug": "d73a4a", "help wanted": "008672"}) {
		t.Errorf("the labels request the upstream got: %v; want the map from the editor", got)
	}
	if got := up.body(t, "PATCH /widgets/7"); !cmp.Equal(got.(map[string]any)["shape"], map[string]any{"side": 3.0}) {
		t.Errorf("the widgets request the upstream got: %v; want the square", got)
	}
	screenshot("catalog-watch")

	// A running call's bar: the time it has used of its timeout.
	b.do("back to Try it", chromedp.Click(css("#nav-try")))
	for range 3 {
		click(`#calls button.remove`)
	}
	jsSet("#add-tool", "sleep")
	click("#add-call")
	jsSet(`#calls input[data-path="ms"]`, "600000")
	jsSet(`#calls input.call-timeout`, "600")
	b.do("run the long sleep", chromedp.Click(css("#run")))
	// (Read once it has run a second or more: at its very start any scale
	// shows a short bar.)
	b.until("the sleep's elapsed time of its timeout", `document.querySelector('#timeline .row')?.dataset.state === "running" && /^[0-9.]+ s of 10 min 0 s$/.test(document.querySelector("#timeline .row .elapsed").textContent)`)
	bar := eval("the running bar", `(r => ({fill: r.querySelector(".barfill").getBoundingClientRect().width / r.querySelector(".track").getBoundingClientRect().width,
		deadline: (r.querySelector(".deadline").getBoundingClientRect().left - r.querySelector(".track").getBoundingClientRect().left) / r.querySelector(".track").getBoundingClientRect().width,
		visible: !r.querySelector(".deadline").hidden}))(document.querySelector("#timeline .row"))`).(map[string]any)
	// Half of a ten-minute timeout has not passed: the bar fills less than
	// half its track, and the deadline marks its end.
	if bar["fill"].(float64) >= 0.5 || bar["deadline"].(float64) < 0.95 || bar["visible"] != true {
		t.Errorf("the running bar fills %.2f of its track, the deadline at %.2f (shown: %v); want well under half, the deadline at the end", bar["fill"], bar["deadline"], bar["visible"])
	}
	screenshot("catalog-running")

	// Times on the server page: local, to the millisecond, how long ago.
	b.do("open the server page", chromedp.Click(css("#nav-server")))
	b.until("the sources' times", `document.querySelectorAll("#server-sources time[datetime]").length >= 2`)
	times := get(b, "read the times", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#page-server time")].map(t => t.textContent)`))
	for _, tm := range times {
		if !regexpTime.MatchString(tm) {
			t.Errorf("a time on the server page reads %q; want 15:04:05.000 (… ago)", tm)
		}
	}
	if raw := get(b, "look for raw timestamps", chromedp.Evaluate[bool](`/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{4,}/.test(document.querySelector("#page-server").textContent)`)); raw {
		t.Error("the server page shows a raw timestamp with nanoseconds")
	}
	checkContrast(b, "server")
	b.do("cancel the sleep", chromedp.Click(css("#nav-watch")), chromedp.Click(css("#cancel")))
	b.until("the sleep cancelled", `document.querySelector("#batch-state").dataset.finished === "true"`)

	// Every page at a desktop's and a phone's width: nothing scrolls
	// sideways, no legend is struck through; with the forms above.
	for _, page := range []string{"tools", "try", "watch", "server"} {
		b.do("open "+page, chromedp.Click(css("#nav-"+page)))
		fits(page + ", desktop")
		screenshot("catalog-" + page + "-desktop")
	}
	b.do("back to Try it with the forms", chromedp.Click(css("#nav-try")))
	click(`#calls button.remove`)
	for _, tool := range []string{"cel_eval", "big_labels_set", "big_widgets_update"} {
		jsSet("#add-tool", tool)
		click("#add-call")
	}
	jsSet(`#calls li.call[data-tool="cel_eval"] textarea.raw`, string(must(json.Marshal(want))))
	b.do("a phone's width", chromedp.EmulateViewport(390, 844))
	for _, page := range []string{"tools", "try", "watch", "server"} {
		b.do("open "+page, chromedp.Click(css("#nav-"+page)))
		fits(page + ", phone")
		screenshot("catalog-" + page + "-phone")
	}
	// The picker's list stays within the phone's width.
	b.do("open Try it on the phone", chromedp.Click(css("#nav-try")))
	jsSet("#add-tool", "")
	b.do("search on the phone", chromedp.Click(css("#add-tool")), chromedp.SendKeys(css("#add-tool"), "code scanning"))
	b.until("the picker's list within the screen", `(r => r.width > 0 && r.left >= 0 && r.right <= document.documentElement.clientWidth)(document.querySelector("#page-try .bar.add .picker-pop").getBoundingClientRect())`)
	fits("try with the picker open, phone")
	// A legend of several lines at a phone's width.
	lines := get(b, "the long legend's height", chromedp.Evaluate[float64](`(l => l.getBoundingClientRect().height / parseFloat(getComputedStyle(l).lineHeight))(document.querySelector('#calls li.call[data-tool="big_widgets_update"] fieldset[data-path$="a_nested_object_whose_name_is_long_enough_to_wrap_on_a_phone"] > legend'))`))
	if lines < 1.5 {
		t.Errorf("the long legend takes %.1f lines at a phone's width; the test wants one of several lines to check", lines)
	}
	screenshot("catalog-try-picker-phone")
}

var regexpTime = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d{3} \((just now|\d+ (s|min|h|days) ago)\)$`)

// must is v, or a panic for err (for values that cannot fail to encode).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
