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
// authorization server carry secrets, or lead to where secrets go: the
// configured headers (which httpSession adds on every round trip,
// redirects included, so Go's own dropping of Authorization on a redirect
// to another host does not apply to them), the OAuth access token, a
// token request's client_secret, and the metadata documents (RFC 9728,
// RFC 8414) that name the token endpoint. So every HTTP client of this
// package follows a redirect only within the origin (scheme, host and
// port) of the request that met it: the server the operator named, which
// may move an endpoint within itself (web frameworks redirect /mcp to
// /mcp/), over the scheme the operator chose, so https is never followed
// to plain http and httpsOrLoopback holds for every hop. A redirect
// anywhere else is refused, not followed without the secret: an MCP
// endpoint or a token endpoint has no reason to send its client to
// another server, and a request without its credentials would only fail
// there less plainly; metadata has no more reason to move, and metadata
// that followed a redirect to plain http could be rewritten on its way to
// name another token endpoint. The error names where it led, for an operator who trusts it to
// configure that URL (url, token_url, issuer).

// maxRedirects bounds the redirects one request follows.
const maxRedirects = 3

// errRedirect is what a refused redirect's error wraps.
var errRedirect = errors.New("refused a redirect")

// sameOriginRedirect is the CheckRedirect of every HTTP client of the
// package.
func sameOriginRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if !sameOrigin(req.URL, via[0].URL) {
		return fmt.Errorf("%w to %s: toolwire follows redirects only within %s (configure the URL it leads to, if that is right)",
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
