// Package console is toolwire's web console: a page, served on the HTTP
// port at /console/, that lists the tools the signed-in caller may call,
// builds and runs batches from forms generated from their input schemas,
// draws a running batch's lanes as a timeline, and shows the server's
// sources and batches in flight.
//
// It is a surface with no server-side logic: its assets (HTML, CSS and
// JavaScript modules, embedded in the binary, no build step) are served
// here, and the page talks to toolwire only through the public contract
// over Connect's JSON protocol (the ToolService and the read-only
// AdminService) from the browser, with the credentials the user types,
// so everything it does passes the same authentication, permissions and
// limits as any client's. The page itself needs no credentials; the
// RPCs it makes do.
//
// The assets are served with a Content-Security-Policy that allows
// scripts, styles and connections from the page's own origin only (no
// inline script, no other origin), and the page renders tool
// descriptions and results as text, never as HTML.
//
// Import rules: console imports only the standard library; it must not
// import the engine, a surface, sources, tools, the store or the
// generated code (docs/architecture.md).
package console

import (
	"embed"
	"flag"
	"io/fs"
	"net/http"
	"strconv"
)

// Path is where the console is served on the HTTP port.
const Path = "/console/"

//go:embed static
var static embed.FS

// Config is the console's configuration; its key sits at the top level of
// the config file. The zero value serves the console when the HTTP port is
// on.
type Config struct {
	// On serves the console at /console/ on the HTTP port (key console,
	// default true; flag --no-console turns it off).
	On *bool `json:"console"`
}

// Enabled reports whether the console is served.
func (c Config) Enabled() bool { return c.On == nil || *c.On }

// Flags registers c's flag on fs.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.BoolFunc("no-console", "serve no web console (/console/) on the HTTP port", func(s string) error {
		off, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		on := !off
		c.On = &on
		return nil
	})
}

// policy is the Content-Security-Policy of every asset: nothing but the
// page's own origin, no inline script or style, images also from data:
// URLs (a result's image content is shown from its bytes). Trusted Types
// with no policy make every sink that parses a string as HTML or script
// (innerHTML, insertAdjacentHTML, document.write, a script's src) throw in
// the browsers that enforce them, so what TestNoHTMLFromText holds the
// scripts to by reading them, the browser holds them to as they run.
const policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

// Handler serves the console's assets under Path: GET and HEAD only.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", policy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// frame-ancestors 'none' says the same to browsers that read it;
		// this, to those that predate it: no page may frame the console's
		// Approve button.
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
