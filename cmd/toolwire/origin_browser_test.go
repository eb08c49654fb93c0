package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// attacksJS runs, in a page of another origin, every way a page has to
// call toolwire at the origin T: fetch with CORS (a preflight first) and
// without (no-cors, the "simple" requests a page may send anywhere), over
// Connect's JSON, gRPC-Web, /mcp and the console's AdminService, /mcp's GET
// stream as an EventSource, and an image. Each tries write_file. It
// returns what the page could see of each: "refused" (fetch failed),
// "opaque" (a no-cors response, unreadable), or the status it read.
const attacksJS = `(async (T, call, mcp) => {
  const seen = {};
  const try_ = async (name, url, init) => {
    try {
      const r = await fetch(url, init);
      seen[name] = r.type === "opaque" ? "opaque" : String(r.status);
    } catch (e) {
      seen[name] = "refused";
    }
  };
  const frame = s => { const b = new TextEncoder().encode(s); const f = new Uint8Array(5 + b.length); new DataView(f.buffer).setUint32(1, b.length); f.set(b, 5); return f; };
  await try_("connect", T + "/toolwire.v1.ToolService/CallTool", {method: "POST", headers: {"Content-Type": "application/json"}, body: call});
  await try_("connect no-cors", T + "/toolwire.v1.ToolService/CallTool", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: call});
  await try_("grpc-web", T + "/toolwire.v1.ToolService/CallTool", {method: "POST", headers: {"Content-Type": "application/grpc-web+json", "X-Grpc-Web": "1"}, body: frame(call)});
  await try_("mcp", T + "/mcp", {method: "POST", headers: {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, body: mcp});
  await try_("mcp no-cors", T + "/mcp", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain", "Accept": "application/json, text/event-stream"}, body: mcp});
  await try_("admin", T + "/toolwire.v1.AdminService/GetServerStatus", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"});
  await try_("admin no-cors", T + "/toolwire.v1.AdminService/GetServerStatus", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: "{}"});
  seen["mcp stream"] = await new Promise(resolve => {
    const es = new EventSource(T + "/mcp");
    es.onopen = () => { es.close(); resolve("open"); };
    es.onerror = () => { es.close(); resolve("refused"); };
  });
  seen["image"] = await new Promise(resolve => {
    const img = new Image();
    img.onload = () => resolve("loaded");
    img.onerror = () => resolve("refused");
    img.src = T + "/mcp?img";
  });
  return seen;
})`

// TestBrowserCannotDriveToolwire drives a real headless Chromium at
// "serve --diag --workspace … --http-listen 127.0.0.1:…" with
// authentication off (the README's setup, which issue 27 attacked):
//
//   - a page of another site (http://evil.example:…, an httptest server
//     the browser resolves to 127.0.0.1) tries every way a page has to
//     call the ToolService over Connect and gRPC-Web, /mcp and the
//     console's AdminService (attacksJS): none succeeds, and on the wire
//     every one of its requests that reaches toolwire gets 403;
//   - a rebinding-shaped page, toolwire's own port under the name
//     evil.example: the console is refused (403), and the page's own
//     same-origin calls get 403;
//   - nothing any of them tried wrote a file;
//   - the console on its own origin (127.0.0.1 and localhost) lists the
//     tools and runs a call.
func TestBrowserCannotDriveToolwire(t *testing.T) {
	t.Parallel()
	browser := testenv.LookPath(t, "chromium")
	ws := t.TempDir()
	s := startServe(t, "--diag", "--workspace", ws, "--http-listen", "127.0.0.1:0", "--log-level", "debug",
		"--admin-listen", "127.0.0.1:0", "--http-allowed-hosts", "not-for-pages.example")
	var addr, admin string
	waitFor(t, "the HTTP port", func() bool { var ok bool; addr, ok = httpAddr(s.stderr.String()); return ok })
	admin = waitAdminAddr(t, s)
	_, port, _ := net.SplitHostPort(addr)
	_, adminPort, _ := net.SplitHostPort(admin)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>a page of another site</title><p>nothing to see</p>")
	}))
	defer evil.Close()
	_, evilPort, _ := net.SplitHostPort(strings.TrimPrefix(evil.URL, "http://"))

	// evil.example is the attacker's name; here it leads to loopback, as
	// a rebinding attacker's DNS makes it.
	b := newBrowserTab(t, browser, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	ctx := b.ctx

	// What toolwire answered on the wire, whatever the page could read.
	w := &wireLog{port: port, key: map[network.RequestID]string{}, status: map[network.RequestID]int64{}}
	if err := chromedp.Listen(ctx, w.note); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://evil.example:"+evilPort+"/")); err != nil {
		t.Fatalf("open the page of another site: %v", err)
	}
	call := writeFileCall("evil-1", "cross-origin.txt")
	mcpCall := writeFileMCP("cross-origin-mcp.txt")
	seen := get(b, "run the attacks", chromedp.Evaluate[map[string]string](fmt.Sprintf("%s(%q, %q, %q)", attacksJS, "http://127.0.0.1:"+port, call, mcpCall), chromedp.EvalAwaitPromise))
	t.Logf("what the page of another site saw: %v", seen)
	for name, got := range seen {
		if got != "refused" && got != "opaque" {
			t.Errorf("the page of another site, %s: %s; want it refused", name, got)
		}
	}
	if len(seen) != 9 {
		t.Errorf("attacks run: %v; want 9", seen)
	}
	// The browser's view of the network: each request that reached
	// toolwire, preflights included, was answered 403.
	// (The browser reports a response's status as it arrives, which may
	// be after the page saw the request fail.)
	var wire map[string][]int64
	for deadline := time.Now().Add(browserWait); ; time.Sleep(10 * time.Millisecond) {
		wire = w.answers()
		var missing []string
		for _, req := range []string{"POST /toolwire.v1.ToolService/CallTool", "OPTIONS /toolwire.v1.ToolService/CallTool", "POST /mcp", "OPTIONS /mcp",
			"POST /toolwire.v1.AdminService/GetServerStatus", "OPTIONS /toolwire.v1.AdminService/GetServerStatus", "GET /mcp", "GET /mcp?img"} {
			if len(wire[req]) == 0 {
				missing = append(missing, req)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not seen on the wire: %q (seen: %v)", missing, wire)
		}
	}
	t.Logf("toolwire's answers on the wire: %v", wire)
	for req, statuses := range wire {
		for _, st := range statuses {
			if st != http.StatusForbidden {
				t.Errorf("%s from a page of another site: %d on the wire; want 403", req, st)
			}
		}
	}

	// Rebinding: toolwire's own port under the attacker's name. The
	// browser counts its requests same-origin; the Host gives it away.
	rebound := "http://evil.example:" + port
	resp := get(b, "open the console under the attacker's name", chromedp.NavigateResponse(rebound+"/console/"))
	if resp.Status != http.StatusForbidden {
		t.Errorf("the console under the attacker's name: %d; want 403", resp.Status)
	}
	sameOrigin := get(b, "call from the rebound page", chromedp.Evaluate[map[string]string](fmt.Sprintf(`(async (call, mcp) => {
  const seen = {};
  for (const [name, path, body, type] of [["connect", "/toolwire.v1.ToolService/CallTool", call, "application/json"], ["mcp", "/mcp", mcp, "application/json"], ["admin", "/toolwire.v1.AdminService/GetServerStatus", "{}", "application/json"]]) {
    const r = await fetch(path, {method: "POST", headers: {"Content-Type": type, "Accept": "application/json, text/event-stream"}, body});
    seen[name] = r.status + " " + (await r.text());
  }
  return seen;
})(%q, %q)`, writeFileCall("evil-2", "rebound.txt"), writeFileMCP("rebound-mcp.txt")), chromedp.EvalAwaitPromise))
	for name, got := range sameOrigin {
		if !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "http_allowed_hosts") {
			t.Errorf("the rebound page's %s: %.300s; want 403 naming http_allowed_hosts", name, got)
		}
	}
	if len(sameOrigin) != 3 {
		t.Errorf("rebound calls: %v", sameOrigin)
	}
	// The admin listener under the attacker's name: the page must not
	// read the profiles, the metrics or the command line (which would
	// show a --store URL's password; here a marker stands for it).
	adminRebound := "http://evil.example:" + adminPort
	resp = get(b, "open the admin listener under the attacker's name", chromedp.NavigateResponse(adminRebound+"/debug/pprof/"))
	if resp.Status != http.StatusForbidden {
		t.Errorf("/debug/pprof/ under the attacker's name: %d; want 403", resp.Status)
	}
	adminSeen := get(b, "read from the rebound admin page", chromedp.Evaluate[map[string]string](`(async () => {
  const seen = {};
  for (const path of ["/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2", "/metrics"]) {
    const r = await fetch(path);
    seen[path] = r.status + " " + (await r.text());
  }
  return seen;
})()`, chromedp.EvalAwaitPromise))
	for path, got := range adminSeen {
		if !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "admin_allowed_hosts") || strings.Contains(got, "not-for-pages") {
			t.Errorf("the rebound admin page's %s: %.300s; want 403 naming admin_allowed_hosts", path, got)
		}
	}
	if len(adminSeen) != 3 {
		t.Errorf("rebound admin reads: %v", adminSeen)
	}

	if entries, _ := os.ReadDir(ws); len(entries) != 0 {
		t.Errorf("the workspace after the attacks holds %v; want nothing written", entries)
	}

	// The console on its own origin works, under either loopback name.
	w.reset()
	for _, origin := range []string{"http://127.0.0.1:" + port, "http://localhost:" + port} {
		resp := get(b, "open the console at "+origin, chromedp.NavigateResponse(origin+"/console/"))
		if resp.Status != http.StatusOK {
			t.Fatalf("the console at %s: %d", origin, resp.Status)
		}
		b.until("the tools at "+origin, `!!document.querySelector('details.tool[data-name="echo"]') && !!document.querySelector('details.tool[data-name="write_file"]')`)
	}
	b.do("add echo", chromedp.Click(chromedp.CSS("#nav-try")), chromedp.SetValue(chromedp.CSS("#add-tool"), "echo"), chromedp.Click(chromedp.CSS("#add-call")))
	b.do("fill echo", chromedp.SendKeys(chromedp.CSS(`#calls [data-path="text"]`), "from the console"), chromedp.Click(chromedp.CSS("#run")))
	b.until("the console's call", `document.querySelector("#batch-state").dataset.finished === "true" && document.querySelector("#results .result pre.text")?.textContent === "from the console"`)
	for req, statuses := range w.answers() {
		for _, st := range statuses {
			if st != http.StatusOK {
				t.Errorf("the console's %s: %d; want 200", req, st)
			}
		}
	}
}

// wireLog keeps the status of each response of toolwire's port the
// browser received, by request: Network.responseReceivedExtraInfo has it
// also for the responses the page may not read (CORS, ORB).
type wireLog struct {
	port   string
	mu     sync.Mutex
	key    map[network.RequestID]string // "METHOD /path"
	status map[network.RequestID]int64
}

// note is the tab's event listener.
func (w *wireLog) note(ev any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	path := func(u string) (string, bool) {
		i := strings.Index(u, ":"+w.port+"/")
		if i < 0 {
			return "", false
		}
		return u[i+len(":"+w.port):], true
	}
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		if p, ok := path(ev.Request.URL); ok {
			w.key[ev.RequestID] = ev.Request.Method + " " + p
		}
	case *network.EventResponseReceived:
		if p, ok := path(ev.Response.URL); ok {
			if ev.Type == network.ResourceTypePreflight {
				w.key[ev.RequestID] = "OPTIONS " + p
			}
			if _, ok := w.status[ev.RequestID]; !ok {
				w.status[ev.RequestID] = ev.Response.Status
			}
		}
	case *network.EventResponseReceivedExtraInfo:
		w.status[ev.RequestID] = ev.StatusCode
	}
}

// answers are the statuses of toolwire's responses by "METHOD /path".
func (w *wireLog) answers() map[string][]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]int64{}
	for id, k := range w.key {
		if st, ok := w.status[id]; ok {
			out[k] = append(out[k], st)
		}
	}
	return out
}

func (w *wireLog) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.key)
	clear(w.status)
}
