package console

import (
	"flag"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	h := Handler()
	for _, c := range []struct {
		method, path string
		status       int
		contentType  string
		body         string
	}{
		{http.MethodGet, "/console/", http.StatusOK, "text/html", `<script type="module" src="js/app.js">`},
		{http.MethodGet, "/console/js/rpc.js", http.StatusOK, "javascript", "application/connect+json"},
		{http.MethodGet, "/console/console.css", http.StatusOK, "text/css", ""},
		{http.MethodGet, "/console/nope.js", http.StatusNotFound, "", ""},
		{http.MethodPost, "/console/", http.StatusMethodNotAllowed, "", ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != c.status || !strings.Contains(rec.Header().Get("Content-Type"), c.contentType) || !strings.Contains(string(body), c.body) {
			t.Errorf("%s %s: %d %q, body %.80q; want %d %q holding %q", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"), body, c.status, c.contentType, c.body)
		}
		if c.status == http.StatusOK {
			csp := rec.Header().Get("Content-Security-Policy")
			if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s: Content-Security-Policy %q, nosniff %q; want same-origin scripts only", c.path, csp, rec.Header().Get("X-Content-Type-Options"))
			}
			// No page may frame it, in browsers old or new.
			if !strings.Contains(csp, "frame-ancestors 'none'") || rec.Header().Get("X-Frame-Options") != "DENY" || rec.Header().Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("%s: frame-ancestors in %q, X-Frame-Options %q, Referrer-Policy %q; want 'none', DENY, no-referrer", c.path, csp, rec.Header().Get("X-Frame-Options"), rec.Header().Get("Referrer-Policy"))
			}
		}
	}
}

// TestNoInlineScript holds the page to its policy: no inline script or
// style, no other origin.
func TestNoInlineScript(t *testing.T) {
	t.Parallel()
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("index.html holds %q, which the Content-Security-Policy forbids or which loads from another origin", bad)
		}
	}
}

// TestNoHTMLFromText holds the page's scripts to building elements with
// dom.js's el() (text nodes only): none of them hands a string to the
// browser's HTML parser or evaluates one as code, so what a tool's
// description, schema or result says can never become markup or script.
func TestNoHTMLFromText(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(static, "static/js/*.js")
	if err != nil || len(files) < 4 {
		t.Fatalf("the page's scripts: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := static.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "DOMParser", "createContextualFragment", "srcdoc", "eval(", "new Function", "setAttribute(\"on", "javascript:"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %q", f, bad)
			}
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	var c Config
	if !c.Enabled() {
		t.Error("the zero Config serves no console; want it on by default")
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse([]string{"--no-console"}); err != nil {
		t.Fatal(err)
	}
	if c.Enabled() {
		t.Error("--no-console left the console on")
	}
	if err := fs.Parse([]string{"--no-console=false"}); err != nil {
		t.Fatal(err)
	}
	if !c.Enabled() {
		t.Error("--no-console=false left the console off")
	}
}
