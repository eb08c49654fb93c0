package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/toolwire/toolwire/engine"
)

// OIDCConfig is the "auth.oidc" section: bearer JWTs from an OpenID
// Connect issuer (an identity provider, or a Kubernetes cluster's
// service-account issuer) name callers by a claim.
type OIDCConfig struct {
	// Issuer is the issuer URL the tokens' "iss" must equal; its
	// /.well-known/openid-configuration names the JWKS when JWKSURL and
	// JWKSFile are empty.
	Issuer string `json:"issuer"`
	// Audience must be among the tokens' "aud".
	Audience string `json:"audience"`
	// JWKSURL is where the issuer's signing keys are, when discovery is not
	// wanted (a Kubernetes API server's /openid/v1/jwks).
	JWKSURL string `json:"jwks_url"`
	// JWKSFile holds the signing keys instead, as a JSON Web Key Set, read
	// at start (for an issuer the server cannot reach).
	JWKSFile string `json:"jwks_file"`
	// CAFile is a PEM file of CAs to trust when fetching discovery and
	// keys, beside the system's (a cluster's CA).
	CAFile string `json:"ca_file"`
	// CallerClaim names the claim that is the caller's ID; default "sub".
	// A dotted path reaches into objects, whose own keys may hold dots:
	// "kubernetes.io.serviceaccount.name".
	CallerClaim string `json:"caller_claim"`
	// GroupsClaim names the claim holding the caller's groups (a string or
	// a list of strings); default "groups". Absent, the caller has none.
	GroupsClaim string `json:"groups_claim"`
	// Resource is the public URL of the server's MCP endpoint, as MCP
	// clients reach it ("https://toolwire.example.com/mcp"), for the
	// protected resource metadata; default: derived from each request.
	Resource string `json:"resource"`
}

// The bounds of fetching an issuer's keys.
const (
	// jwksTimeout bounds each fetch of discovery or keys: no request
	// waits longer for them.
	jwksTimeout = 2 * time.Second
	// jwksRefreshEvery is how often at most a token signed by a key not
	// in the cached set makes the keys be fetched again (rotation), so
	// tokens with made-up key IDs cannot make the server hammer the
	// issuer.
	jwksRefreshEvery = 10 * time.Second
	// clockSkew is how late past its "exp" a token is still accepted.
	clockSkew = 30 * time.Second
)

// The verified-token cache: a JWT checked once is known by its SHA-256 for
// up to tokenCacheTTL (never past its expiry), as kube-apiserver caches
// token reviews, so an agent sending the same token on every request pays
// for one signature check, not one per request. At most tokenCacheSize
// tokens are kept; a full cache forgets an arbitrary one.
const (
	tokenCacheTTL  = time.Minute
	tokenCacheSize = 4096
)

// signingAlgs are the algorithms a token may be signed with; never "none".
var signingAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.EdDSA}

// check reports what is wrong with c, without reading anything.
func (c *OIDCConfig) check() error {
	switch {
	case c.Issuer == "":
		return errors.New("auth.oidc.issuer is required")
	case c.Audience == "":
		return errors.New("auth.oidc.audience is required: tokens for other services must not be accepted")
	case c.JWKSURL != "" && c.JWKSFile != "":
		return errors.New("auth.oidc: jwks_url and jwks_file are exclusive")
	}
	for key, raw := range map[string]string{"issuer": c.Issuer, "jwks_url": c.JWKSURL, "resource": c.Resource} {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname()))) {
			return fmt.Errorf("auth.oidc.%s %q: want an https URL (http only on loopback)", key, raw)
		}
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// jwtVerifier checks bearer JWTs of one issuer and names their callers.
type jwtVerifier struct {
	cfg      OIDCConfig
	verifier *oidc.IDTokenVerifier
	keys     *keySet

	mu       sync.Mutex
	verified map[[sha256.Size]byte]verifiedToken
}

type verifiedToken struct {
	id    *engine.Identity
	until time.Time
}

func newJWTVerifier(cfg OIDCConfig) (*jwtVerifier, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.CallerClaim == "" {
		cfg.CallerClaim = "sub"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	ks := &keySet{issuer: cfg.Issuer, jwksURL: cfg.JWKSURL, client: &http.Client{Timeout: jwksTimeout}, every: jwksRefreshEvery}
	if cfg.CAFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("auth.oidc.ca_file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth.oidc.ca_file %s: no PEM certificate in it", cfg.CAFile)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig.RootCAs = pool
		ks.client.Transport = tr
	}
	if cfg.JWKSFile != "" {
		b, err := os.ReadFile(cfg.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("auth.oidc.jwks_file: %w", err)
		}
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
			return nil, fmt.Errorf("auth.oidc.jwks_file %s: not a JSON Web Key Set with keys (%v)", cfg.JWKSFile, err)
		}
		ks.set, ks.static = &set, true
	}
	return &jwtVerifier{
		cfg: cfg,
		verifier: oidc.NewVerifier(cfg.Issuer, ks, &oidc.Config{
			ClientID:             cfg.Audience,
			SupportedSigningAlgs: signingAlgs,
			Now:                  func() time.Time { return time.Now().Add(-clockSkew) },
		}),
		keys:     ks,
		verified: make(map[[sha256.Size]byte]verifiedToken),
	}, nil
}

// looksLikeJWT tells a JWT (three base64url parts, a JSON header) from a
// static token, which has no dots.
func looksLikeJWT(token string) bool {
	return strings.HasPrefix(token, "eyJ") && strings.Count(token, ".") == 2
}

// verify checks token and returns the identity its claims name, or why it
// names none; the reason never quotes the token.
func (j *jwtVerifier) verify(ctx context.Context, token string) (*engine.Identity, error) {
	sum := sha256.Sum256([]byte(token))
	now := time.Now()
	j.mu.Lock()
	v, ok := j.verified[sum]
	j.mu.Unlock()
	if ok && now.Before(v.until) {
		return v.id, nil
	}
	id, exp, err := j.check(ctx, token)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.verified) >= tokenCacheSize {
		for k := range j.verified {
			delete(j.verified, k)
			break
		}
	}
	until := now.Add(tokenCacheTTL)
	if e := exp.Add(clockSkew); e.Before(until) {
		until = e
	}
	j.verified[sum] = verifiedToken{id: id, until: until}
	return id, nil
}

// check verifies token's signature and claims, and returns the identity
// they name and the token's expiry.
func (j *jwtVerifier) check(ctx context.Context, token string) (*engine.Identity, time.Time, error) {
	t, err := j.verifier.Verify(ctx, token)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) {
			return nil, time.Time{}, fmt.Errorf("invalid JWT: expired at %s", expired.Expiry.UTC().Format(time.RFC3339))
		}
		return nil, time.Time{}, fmt.Errorf("invalid JWT: %s", strings.TrimPrefix(err.Error(), "oidc: "))
	}
	var claims map[string]any
	if err := t.Claims(&claims); err != nil {
		return nil, time.Time{}, fmt.Errorf("invalid JWT: its claims are not a JSON object: %v", err)
	}
	id, _ := claim(claims, j.cfg.CallerClaim).(string)
	if id == "" {
		return nil, time.Time{}, fmt.Errorf("invalid JWT: no string claim %q names the caller", j.cfg.CallerClaim)
	}
	var groups []string
	switch g := claim(claims, j.cfg.GroupsClaim).(type) {
	case string:
		groups = []string{g}
	case []any:
		for _, v := range g {
			if s, ok := v.(string); ok {
				groups = append(groups, s)
			}
		}
	}
	return &engine.Identity{ID: id, Groups: groups, Claims: claims, Method: engine.MethodJWT}, t.Expiry, nil
}

// claim returns the value at path in claims: a key, or a dotted path into
// objects whose keys may themselves hold dots ("kubernetes.io.namespace"
// is "namespace" in the object "kubernetes.io"). Longer keys are tried
// first. nil when there is none.
func claim(claims map[string]any, path string) any {
	if v, ok := claims[path]; ok {
		return v
	}
	for i := len(path) - 1; i > 0; i-- {
		if path[i] != '.' {
			continue
		}
		if sub, ok := claims[path[:i]].(map[string]any); ok {
			if v := claim(sub, path[i+1:]); v != nil {
				return v
			}
		}
	}
	return nil
}

// keySet is an issuer's signing keys, as go-oidc's IDTokenVerifier asks
// for them: cached, fetched when a token names a key the cache lacks, at
// most every jwksRefreshEvery and for at most jwksTimeout, so a JWKS
// endpoint that is down or slow leaves the cached keys working and makes
// no request wait longer than that.
type keySet struct {
	issuer string
	client *http.Client
	static bool          // set from a file: never fetched
	every  time.Duration // fetch again for an unknown key at most this often (jwksRefreshEvery)

	mu  sync.RWMutex
	set *jose.JSONWebKeySet // nil before the first fetch

	fetching sync.Mutex // one fetch at a time; guards the fields below
	jwksURL  string     // from the config or discovery
	last     time.Time  // the last fetch attempt
	lastErr  error      // its error
}

// VerifySignature implements oidc.KeySet.
func (k *keySet) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	jws, err := jose.ParseSigned(token, joseAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	keys, err := k.lookup(ctx, kid)
	if err != nil {
		return nil, err
	}
	for _, key := range keys {
		if payload, err := jws.Verify(key); err == nil {
			return payload, nil
		}
	}
	return nil, errors.New("signature does not verify with the issuer's keys")
}

var joseAlgs = func() []jose.SignatureAlgorithm {
	out := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, a := range signingAlgs {
		out[i] = jose.SignatureAlgorithm(a)
	}
	return out
}()

// lookup returns the keys that may have signed a token naming kid,
// fetching the set when it lacks kid and may be fetched again. A token of
// a cached key never waits for a fetch.
func (k *keySet) lookup(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	if keys := k.cached(kid); len(keys) > 0 {
		return keys, nil
	}
	if k.static {
		return nil, fmt.Errorf("signed by key %q, which jwks_file lacks", kid)
	}
	// One fetch at a time: concurrent requests for unknown keys wait for
	// it (bounded by jwksTimeout) rather than each starting their own.
	k.fetching.Lock()
	defer k.fetching.Unlock()
	if keys := k.cached(kid); len(keys) > 0 {
		return keys, nil // the fetch just waited for brought it
	}
	if !k.last.IsZero() && time.Since(k.last) < k.every {
		if k.lastErr != nil {
			return nil, fmt.Errorf("the issuer's keys could not be fetched: %v", k.lastErr)
		}
		return nil, fmt.Errorf("signed by key %q, which the issuer does not publish", kid)
	}
	k.last = time.Now()
	set, err := k.fetch(ctx)
	k.lastErr = err
	if err != nil {
		if k.cached("") == nil {
			return nil, fmt.Errorf("the issuer's keys could not be fetched: %v", err)
		}
		return nil, fmt.Errorf("signed by key %q, not among the cached keys, and the issuer's keys could not be fetched again: %v", kid, err)
	}
	k.mu.Lock()
	k.set = set
	k.mu.Unlock()
	if keys := k.cached(kid); len(keys) > 0 {
		return keys, nil
	}
	return nil, fmt.Errorf("signed by key %q, which the issuer does not publish", kid)
}

// cached returns the cached keys for kid: the one with that ID, or every
// key when the token names none.
func (k *keySet) cached(kid string) []jose.JSONWebKey {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.set == nil {
		return nil
	}
	if kid == "" {
		return k.set.Keys
	}
	return k.set.Key(kid)
}

// fetch reads the key set (after discovery, the first time, when no JWKS
// URL is configured), within jwksTimeout.
func (k *keySet) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksTimeout)
	defer cancel()
	if k.jwksURL == "" {
		var disc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := k.getJSON(ctx, strings.TrimSuffix(k.issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
			return nil, fmt.Errorf("discovery: %w", err)
		}
		if disc.Issuer != k.issuer {
			return nil, fmt.Errorf("discovery: the document is of issuer %q, not %q", disc.Issuer, k.issuer)
		}
		if disc.JWKSURI == "" {
			return nil, errors.New("discovery: the document names no jwks_uri")
		}
		k.jwksURL = disc.JWKSURI
	}
	var set jose.JSONWebKeySet
	if err := k.getJSON(ctx, k.jwksURL, &set); err != nil {
		return nil, err
	}
	return &set, nil
}

func (k *keySet) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("GET %s: no answer within %s", url, jwksTimeout)
		}
		return fmt.Errorf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %v", url, err)
	}
	return nil
}
