package mcpsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/toolwire/toolwire/internal/envref"
	"github.com/toolwire/toolwire/internal/redact"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OAuthConfig signs toolwire in to an MCP server with the OAuth 2.0 client
// credentials grant, as the MCP authorization specification lays out:
// a 401's WWW-Authenticate names the protected resource metadata (RFC
// 9728), which names the authorization server, whose metadata (RFC 8414,
// or OpenID Connect discovery) names the token endpoint. The token is
// requested for the server's resource (RFC 8707), cached, and refreshed
// before it expires; a 401 mid-session gets one new token and a retry.
type OAuthConfig struct {
	ClientID string `json:"client_id"`
	// ClientSecret should reference the environment ("{{MCP_SECRET}}"); it
	// is read for every token request and never logged.
	ClientSecret string `json:"client_secret"`
	// Scopes to ask for; default those the server's 401 or its resource
	// metadata name.
	Scopes []string `json:"scopes,omitempty"`
	// TokenURL skips discovery: tokens come from there, for the server's
	// URL as the resource.
	TokenURL string `json:"token_url,omitempty"`
	// Issuer skips the protected resource metadata: the authorization
	// server's metadata is read from this issuer; with discovery, it must
	// be the issuer the metadata names.
	Issuer string `json:"issuer,omitempty"`
}

func (o *OAuthConfig) validate() error {
	if o.ClientID == "" {
		return errors.New("client_id is required")
	}
	if o.ClientSecret == "" {
		return errors.New("client_secret is required (as {{ENV_VAR}})")
	}
	if err := envref.CheckSecret(o.ClientSecret); err != nil {
		return fmt.Errorf("client_secret: %w", err)
	}
	for _, u := range []struct{ key, value string }{{"token_url", o.TokenURL}, {"issuer", o.Issuer}} {
		if u.value == "" {
			continue
		}
		if err := httpsOrLoopback(u.value); err != nil {
			return fmt.Errorf("%s: %w", u.key, err)
		}
	}
	return nil
}

func (o *OAuthConfig) equal(p *OAuthConfig) bool {
	if o == nil || p == nil {
		return o == p
	}
	return o.ClientID == p.ClientID && o.ClientSecret == p.ClientSecret && slices.Equal(o.Scopes, p.Scopes) &&
		o.TokenURL == p.TokenURL && o.Issuer == p.Issuer
}

// httpsOrLoopback accepts an https URL, or http to a loopback host: a
// secret goes to the token endpoint.
func httpsOrLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return redact.Error(err, raw)
	}
	switch {
	case u.Scheme == "https" && u.Host != "":
		return nil
	case u.Scheme == "http" && u.Host != "":
		host := u.Hostname()
		if ip, err := netip.ParseAddr(host); host == "localhost" || (err == nil && ip.IsLoopback()) {
			return nil
		}
		return fmt.Errorf("%q: credentials go only over https (or http to a loopback host)", redact.URL(raw))
	}
	return fmt.Errorf("%q: want an absolute https URL", redact.URL(raw))
}

// oauthClient is the go-sdk transport's auth.OAuthHandler for one session:
// the transport asks TokenSource for every request, and calls Authorize
// once when a request gets 401 or 403, then retries it.
type oauthClient struct {
	cfg      OAuthConfig
	endpoint string       // the server's URL: the resource, unless its metadata says otherwise
	http     *http.Client // for metadata and token requests; redirects within their origin only

	mu sync.Mutex
	ts *reuse // nil until the first Authorize (or made at once with token_url)
}

var _ auth.OAuthHandler = (*oauthClient)(nil)

// newOAuthClient returns the handler for the server at endpoint, sending
// its metadata and token requests with a copy of client that follows
// redirects only within a request's origin (see redirect.go).
func newOAuthClient(cfg OAuthConfig, endpoint string, client *http.Client) *oauthClient {
	c := *client
	c.CheckRedirect = sameOriginRedirect
	return &oauthClient{cfg: cfg, endpoint: endpoint, http: &c}
}

// TokenSource implements auth.OAuthHandler: nil until a 401 has shown
// where tokens come from, unless token_url says it beforehand.
func (c *oauthClient) TokenSource(context.Context) (oauth2.TokenSource, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ts == nil && c.cfg.TokenURL != "" {
		ts, err := c.source(c.cfg.TokenURL, c.endpoint, c.cfg.Scopes, "")
		if err != nil {
			return nil, err
		}
		c.ts = ts
	}
	if c.ts == nil {
		return nil, nil // a nil *reuse in the interface would not be nil
	}
	return c.ts, nil
}

// Authorize implements auth.OAuthHandler: it discovers the token endpoint
// (unless configured), gets a new token, and replaces the cached one: for
// the first 401 of a session, and for one that comes later (a revoked or
// expired token), once per request.
func (c *oauthClient) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	defer resp.Body.Close()
	defer io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	tokenURL, resource, scopes, authMethod := c.cfg.TokenURL, c.endpoint, c.cfg.Scopes, ""
	if tokenURL == "" {
		d, err := c.discover(ctx, resp)
		if err != nil {
			return fmt.Errorf("oauth discovery: %w", err)
		}
		tokenURL, resource, authMethod = d.tokenURL, d.resource, d.authMethod
		if len(scopes) == 0 {
			scopes = d.scopes
		}
	}
	ts, err := c.source(tokenURL, resource, scopes, authMethod)
	if err != nil {
		return err
	}
	// The first token now, under the request's context, so a refusal is
	// this request's error.
	if _, err := ts.first(ctx); err != nil {
		return fmt.Errorf("oauth token request to %s: %w", tokenURL, tokenError(err))
	}
	c.mu.Lock()
	c.ts = ts
	c.mu.Unlock()
	return nil
}

// discovered is where discovery leads.
type discovered struct {
	tokenURL, resource, authMethod string
	scopes                         []string
}

// discover follows the 401's WWW-Authenticate to the protected resource
// metadata (or the well-known URLs of the server's), to its authorization
// server's metadata.
func (c *oauthClient) discover(ctx context.Context, resp *http.Response) (*discovered, error) {
	d := &discovered{resource: c.endpoint}
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil, fmt.Errorf("the server's WWW-Authenticate: %w", err)
	}
	var metadataURL string
	for _, ch := range challenges {
		if ch.Scheme != "bearer" {
			continue
		}
		if u := ch.Params["resource_metadata"]; u != "" {
			metadataURL = u
		}
		if s := ch.Params["scope"]; s != "" {
			d.scopes = strings.Fields(s)
		}
	}
	issuer := c.cfg.Issuer
	if issuer == "" {
		prm, err := c.resourceMetadata(ctx, metadataURL)
		if err != nil {
			return nil, err
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, errors.New("the protected resource metadata names no authorization server")
		}
		issuer, d.resource = prm.AuthorizationServers[0], prm.Resource
		if len(d.scopes) == 0 {
			d.scopes = prm.ScopesSupported
		}
	}
	asm, err := c.serverMetadata(ctx, issuer)
	if err != nil {
		return nil, err
	}
	if len(asm.GrantTypesSupported) > 0 && !slices.Contains(asm.GrantTypesSupported, "client_credentials") {
		return nil, fmt.Errorf("the authorization server %s does not offer the client_credentials grant (it offers %s)", issuer, strings.Join(asm.GrantTypesSupported, ", "))
	}
	d.tokenURL = asm.TokenEndpoint
	for _, m := range asm.TokenEndpointAuthMethodsSupported {
		if m == "client_secret_basic" || m == "client_secret_post" {
			d.authMethod = m
			break
		}
	}
	return d, nil
}

// resourceMetadata reads the protected resource metadata (RFC 9728) from
// the URL the 401 named, else from the well-known URLs for the server's
// URL: with its path inserted, then at the root.
func (c *oauthClient) resourceMetadata(ctx context.Context, fromChallenge string) (*oauthex.ProtectedResourceMetadata, error) {
	u, err := url.Parse(c.endpoint)
	if err != nil {
		return nil, err
	}
	type try struct{ metadata, resource string }
	var tries []try
	if fromChallenge != "" {
		tries = append(tries, try{fromChallenge, c.endpoint})
	}
	root := *u
	root.Path, root.RawPath, root.RawQuery = "/.well-known/oauth-protected-resource", "", ""
	if p := strings.Trim(u.Path, "/"); p != "" {
		withPath := root
		withPath.Path += "/" + p
		tries = append(tries, try{withPath.String(), c.endpoint})
	}
	origin := *u
	origin.Path, origin.RawPath, origin.RawQuery = "", "", ""
	tries = append(tries, try{root.String(), origin.String()})
	var errs []error
	for _, t := range tries {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, t.metadata, t.resource, c.http)
		if err == nil && prm != nil {
			return prm, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no protected resource metadata for %s: %w", c.endpoint, errors.Join(errs...))
}

// serverMetadata reads the authorization server's metadata: RFC 8414's
// well-known URL, then OpenID Connect discovery's. The go-sdk's
// GetAuthServerMeta insists on PKCE, which the client credentials grant
// has no use for, so this reads them itself with the same checks:
// https or loopback, and the issuer the document names must be the one
// asked for.
func (c *oauthClient) serverMetadata(ctx context.Context, issuer string) (*oauthex.AuthServerMeta, error) {
	if err := httpsOrLoopback(issuer); err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	u, err := url.Parse(issuer)
	if err != nil {
		return nil, err
	}
	p := strings.Trim(u.Path, "/")
	var urls []string
	for _, wk := range []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
		v := *u
		v.Path = wk
		if p != "" {
			v.Path += "/" + p
		}
		urls = append(urls, v.String())
	}
	if p != "" { // OpenID Connect's own form: the path, then the well-known part
		v := *u
		v.Path = "/" + p + "/.well-known/openid-configuration"
		urls = append(urls, v.String())
	}
	var tried []string
	for _, mu := range urls {
		asm, status, err := getJSON[oauthex.AuthServerMeta](ctx, c.http, mu)
		if err != nil {
			return nil, err
		}
		if status != http.StatusOK {
			tried = append(tried, fmt.Sprintf("%s: HTTP %d", mu, status))
			continue
		}
		if strings.TrimSuffix(asm.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
			return nil, fmt.Errorf("%s names issuer %q, not %q", mu, asm.Issuer, issuer)
		}
		if asm.TokenEndpoint == "" {
			return nil, fmt.Errorf("%s names no token_endpoint", mu)
		}
		if err := httpsOrLoopback(asm.TokenEndpoint); err != nil {
			return nil, fmt.Errorf("%s: token_endpoint: %w", mu, err)
		}
		return asm, nil
	}
	return nil, fmt.Errorf("no authorization server metadata for %s (%s)", issuer, strings.Join(tried, "; "))
}

// getJSON GETs a small JSON document; a non-200 status is returned, not
// an error.
func getJSON[T any](ctx context.Context, c *http.Client, u string) (*T, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, nil
	}
	var v T
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", u, err)
	}
	return &v, resp.StatusCode, nil
}

// source returns a token source for the client credentials grant at
// tokenURL, asking for resource (RFC 8707) and scopes; the secret is read
// from the environment for each token request.
func (c *oauthClient) source(tokenURL, resource string, scopes []string, authMethod string) (*reuse, error) {
	secret, err := envref.Expand(c.cfg.ClientSecret)
	if err != nil {
		return nil, fmt.Errorf("oauth client_secret: %w", err)
	}
	cc := &clientcredentials.Config{
		ClientID: c.cfg.ClientID, ClientSecret: secret, TokenURL: tokenURL, Scopes: scopes,
		EndpointParams: url.Values{"resource": {resource}},
	}
	switch authMethod {
	case "client_secret_basic":
		cc.AuthStyle = oauth2.AuthStyleInHeader
	case "client_secret_post":
		cc.AuthStyle = oauth2.AuthStyleInParams
	}
	return &reuse{cc: cc, http: c.http}, nil
}

// refreshEarly is how long before a token's expiry a new one is fetched.
const refreshEarly = 30 * time.Second

// reuse caches a token and fetches a new one when it is within
// refreshEarly of expiring.
type reuse struct {
	cc   *clientcredentials.Config
	http *http.Client

	mu  sync.Mutex
	tok *oauth2.Token
}

// Token implements oauth2.TokenSource. The transport calls it for every
// request, under no context of the request's, so a fetch is bounded by a
// timeout of its own rather than by a caller that may have gone.
func (r *reuse) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.first(ctx)
}

// first returns the cached token while it is fresh, else fetches one with
// ctx.
func (r *reuse) first(ctx context.Context) (*oauth2.Token, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tok != nil && (r.tok.Expiry.IsZero() || time.Until(r.tok.Expiry) > refreshEarly) {
		return r.tok, nil
	}
	tok, err := r.cc.Token(context.WithValue(ctx, oauth2.HTTPClient, r.http))
	if err != nil {
		return nil, err
	}
	r.tok = tok
	return tok, nil
}

// tokenError says what a token endpoint's refusal means, without its body
// beyond the OAuth error code and description.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		if re.ErrorCode != "" {
			msg += ": " + re.ErrorCode
		}
		if re.ErrorDescription != "" {
			msg += ": " + re.ErrorDescription
		}
		if re.ErrorCode == "invalid_client" {
			msg += " (check client_id and client_secret)"
		}
		return errors.New(msg)
	}
	return err
}
