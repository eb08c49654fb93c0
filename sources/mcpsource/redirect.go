package mcpsource

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolwire/toolwire/internal/redact"
)

// Redirects. The requests toolwire sends an MCP server and its
// authorization server carry secrets: the configured headers (which
// httpSession adds on every round trip, redirects included, so Go's own
// dropping of Authorization on a redirect to another host does not apply
// to them), the OAuth access token, and a token request's client_secret.
// Such a request follows a redirect only within its own origin (scheme,
// host and port): the server its secret was configured for, which may move
// an endpoint within itself (web frameworks redirect /mcp to /mcp/). A
// redirect anywhere else is refused, not followed without the secret: an
// MCP endpoint or a token endpoint has no reason to send its client to
// another server, and a request without its credentials would only fail
// there less plainly. The error names where it led, for an operator who
// trusts it to configure that URL.

// maxRedirects bounds the redirects one request follows.
const maxRedirects = 3

// errRedirect is what a refused redirect's error wraps.
var errRedirect = errors.New("refused a redirect")

// withCredentialsRedirect is the CheckRedirect of clients whose requests
// carry secrets: the MCP endpoint's and the token endpoint's.
func withCredentialsRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if !sameOrigin(req.URL, via[0].URL) {
		return fmt.Errorf("%w to %s: a request carrying credentials is redirected only within %s (set the URL toolwire is given to where it leads, if that is right)",
			errRedirect, redact.URL(req.URL.String()), origin(via[0].URL))
	}
	return nil
}

// sameOrigin reports whether a and b have the same scheme, host and port
// (an absent port being the scheme's default).
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}

// origin is u's scheme and host, for messages.
func origin(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}
