package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/follow"
	"github.com/toolwire/toolwire/internal/redact"
	"github.com/toolwire/toolwire/internal/tlsfiles"
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
	// CallerPrefix starts the ID of every caller a JWT names: "oidc:"
	// makes the token whose caller claim is "alice" the caller
	// "oidc:alice", never the static token named "alice". NoPrefix ("-")
	// means none, on purpose: JWT callers share their names with the
	// other unprefixed callers. Unset means none too, which New accepts
	// only while no other way of naming callers (static tokens, client
	// certificates) is unprefixed: see the package's identity rules.
	CallerPrefix string `json:"caller_prefix"`
	// GroupsClaim names the claim holding the caller's groups (a string or
	// a list of strings); default "groups". Absent, the caller has none.
	GroupsClaim string `json:"groups_claim"`
	// GroupsPrefix starts each group the groups claim names ("oidc:"
	// makes the issuer's group "admins" "oidc:admins"), so that groups
	// anyone able to create groups at the issuer names cannot pose as
	// the groups the configuration means (auth.groups, the server view's
	// group). Unset means none, and the server warns at start; NoPrefix
	// ("-") means none, on purpose: the issuer's groups are the
	// configuration's.
	GroupsPrefix string `json:"groups_prefix"`
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
	// issuer; and how often a failed fetch is tried again.
	jwksRefreshEvery = 10 * time.Second
	// A fetched key set is used for as long as the issuer's
	// Cache-Control: max-age says (less the response's Age),
	// jwksDefaultAge without one, and never for less than jwksMinAge nor
	// more than jwksMaxAge: past that it is fetched again before a token
	// is trusted to it, so a key the issuer removed (a compromised one) is
	// refused within jwksMaxAge even when no token names a new key. A
	// quarter before then it is fetched again in the background, so that
	// requests do not wait for it.
	jwksDefaultAge = 5 * time.Minute
	jwksMinAge     = time.Minute
	jwksMaxAge     = time.Hour
	// jwksFileRecheck is how often jwks_file is looked at again: a
	// changed file (a ConfigMap updated) is read again.
	jwksFileRecheck = 10 * time.Second
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
		if u, err := url.Parse(raw); err != nil || !secureURL(u) {
			return fmt.Errorf("auth.oidc.%s %q: want an https URL (http only on loopback)", key, redact.URL(raw))
		}
	}
	return nil
}

// secureURL reports whether u is an https URL, or an http one on
// loopback: where the issuer's documents and keys may come from, whoever
// names it (the config, discovery's jwks_uri, a redirect), since whoever
// can change keys fetched in the clear can sign any caller's token.
func secureURL(u *url.URL) bool {
	return u.Host != "" && (u.Scheme == "https" || u.Scheme == "http" && loopbackHost(u.Hostname()))
}

// maxRedirects is how many redirects a fetch of the issuer's documents
// follows, as net/http's default.
const maxRedirects = 10

// checkRedirect is the key set client's CheckRedirect: a redirect is
// followed only to a secureURL.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if !secureURL(req.URL) {
		return fmt.Errorf("redirected to %q: want an https URL (http only on loopback)", redact.URL(req.URL.String()))
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
	ns       namespaces          // the ID a caller claim names
	groups   map[string][]string // auth.groups, by caller ID
	verifier *oidc.IDTokenVerifier
	keys     *keySet

	mu       sync.Mutex
	verified map[[sha256.Size]byte]verifiedToken
}

type verifiedToken struct {
	id    *engine.Identity
	until time.Time
	gen   uint64 // the key set's generation it was checked in
}

func newJWTVerifier(cfg OIDCConfig, ns namespaces, groups map[string][]string, log *slog.Logger) (*jwtVerifier, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.CallerClaim == "" {
		cfg.CallerClaim = "sub"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.GroupsPrefix == NoPrefix {
		cfg.GroupsPrefix = ""
	}
	ks := &keySet{issuer: cfg.Issuer, jwksURL: cfg.JWKSURL, client: &http.Client{Timeout: jwksTimeout, CheckRedirect: checkRedirect},
		every: jwksRefreshEvery, now: time.Now, log: log, file: cfg.JWKSFile}
	if cfg.CAFile != "" {
		// Read again when the file changes: an issuer whose CA is rotated
		// is trusted without a restart.
		cas, err := tlsfiles.LoadCAsBesideSystem(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("auth.oidc.ca_file: %w", err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{}
		}
		// net/http names each connection's server; crypto/tls sends no
		// name for an IP address, which is then the issuer's (a key set
		// on another IP address is refused, not taken unchecked).
		tr.TLSClientConfig.InsecureSkipVerify = true
		tr.TLSClientConfig.VerifyConnection = cas.VerifyServer(issuerHost(cfg.Issuer))
		ks.client.Transport = tr
	}
	if cfg.JWKSFile != "" {
		if err := ks.readFile(); err != nil {
			return nil, fmt.Errorf("auth.oidc.jwks_file: %w", err)
		}
	}
	return &jwtVerifier{
		cfg:    cfg,
		ns:     ns,
		groups: groups,
		verifier: oidc.NewVerifier(cfg.Issuer, ks, &oidc.Config{
			ClientID:             cfg.Audience,
			SupportedSigningAlgs: signingAlgs,
			Now:                  func() time.Time { return time.Now().Add(-clockSkew) },
		}),
		keys:     ks,
		verified: make(map[[sha256.Size]byte]verifiedToken),
	}, nil
}

// issuerHost is the host of the issuer URL, without its port.
func issuerHost(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// looksLikeJWT tells a JWT (three base64url parts, a JSON header) from a
// static token, which has no dots.
func looksLikeJWT(token string) bool {
	return strings.HasPrefix(token, "eyJ") && strings.Count(token, ".") == 2
}

// verify checks token and returns the identity its claims name, or why it
// names none; the reason never quotes the token.
func (j *jwtVerifier) verify(ctx context.Context, token string) (*engine.Identity, error) {
	// The keys first, so that a token remembered from before the issuer
	// dropped its key does not outlive the key. One reading of the clock
	// serves both (time.Now costs up to 200 ns on a VM, a fair share of a
	// remembered token's cost).
	now := j.keys.now()
	gen := j.keys.maintain(ctx, now)
	sum := sha256.Sum256([]byte(token))
	j.mu.Lock()
	v, ok := j.verified[sum]
	j.mu.Unlock()
	if ok && now.Before(v.until) && v.gen == gen {
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
	j.verified[sum] = verifiedToken{id: id, until: until, gen: gen}
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
	name, _ := claim(claims, j.cfg.CallerClaim).(string)
	if name == "" {
		return nil, time.Time{}, fmt.Errorf("invalid JWT: no string claim %q names the caller", j.cfg.CallerClaim)
	}
	id, err := j.ns.name(engine.MethodJWT, name)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("invalid JWT: %v", err)
	}
	var groups []string
	switch g := claim(claims, j.cfg.GroupsClaim).(type) {
	case string:
		groups = []string{j.cfg.GroupsPrefix + g}
	case []any:
		for _, v := range g {
			if s, ok := v.(string); ok {
				groups = append(groups, j.cfg.GroupsPrefix+s)
			}
		}
	}
	groups = append(groups, j.groups[id]...)
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
// for them. They are fetched at the first token, and again:
//
//   - when a token names a key the set lacks (a rotation), at most every
//     jwksRefreshEvery, so made-up key IDs cannot make the server hammer
//     the issuer;
//   - when the set has been used for as long as the issuer lets it be
//     cached (see jwksDefaultAge), before a token is trusted to it, so a
//     key the issuer removed stops verifying even though no token names a
//     new one; a quarter before then in the background, so a steady flow
//     of requests never waits for it.
//
// Each fetch takes at most jwksTimeout. With the issuer down or slow, the
// keys fetched last keep working (a request waits for at most one fetch,
// the first after the set expired) and are fetched again in the
// background every jwksRefreshEvery. A set from jwks_file is never
// fetched; the file is read again when it changes (checked every
// jwksFileRecheck).
//
// A key leaving the set moves the set to a new generation, which the
// verified-token cache checks, so no remembered token outlives its key.
type keySet struct {
	issuer string
	client *http.Client
	file   string           // jwks_file: read, never fetched
	every  time.Duration    // fetch again for an unknown key, or after a failed fetch, at most this often (jwksRefreshEvery)
	now    func() time.Time // the clock of the set's age and of the verified-token cache (tests move it)
	log    *slog.Logger
	onLoad func(error) // tests: after each fetch or read of the set, with its error

	mu      sync.RWMutex
	set     *jose.JSONWebKeySet // nil before the first fetch
	gen     uint64              // moves on whenever a key leaves set
	expires time.Time           // past it, set is fetched again before it is trusted
	renew   time.Time           // past it, set is fetched again in the background (jwks_file: looked at again)
	failing bool                // the last fetch failed: set is what was fetched before

	fetching sync.Mutex   // one fetch at a time; guards the fields below
	jwksURL  string       // from the config or discovery
	last     time.Time    // the last fetch attempt
	lastErr  error        // its error
	fileSeen follow.Stamp // jwks_file as it was when read
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
	kid, alg := jws.Signatures[0].Header.KeyID, jws.Signatures[0].Header.Algorithm
	keys, err := k.lookup(ctx, kid)
	if err != nil {
		return nil, err
	}
	if keys = fitting(keys, alg); len(keys) > maxKeysTried {
		if kid == "" {
			return nil, fmt.Errorf("names no key (kid), and the issuer publishes %d keys for %s, more than the %d a token is checked against: a token must name its key", len(keys), alg, maxKeysTried)
		}
		return nil, fmt.Errorf("names key %q, which the issuer publishes %d times for %s, more than the %d a token is checked against", kid, len(keys), alg, maxKeysTried)
	}
	for _, key := range keys {
		if payload, err := jws.Verify(key); err == nil {
			return payload, nil
		}
	}
	return nil, errors.New("signature does not verify with the issuer's keys")
}

// maxKeysTried bounds the keys one token's signature is checked against:
// those of its algorithm's kind among the keys it names, or among all the
// issuer's keys when it names none. A caller chooses to send a token
// naming no key, and checking an RSA signature costs tens of
// microseconds: against a set of 2000 keys (827 KB) each forged token took
// 75 ms of CPU. Issuers whose tokens name no key publish one or two.
const maxKeysTried = 16

// fitting returns the keys of keys whose kind alg's signatures can be
// checked against (an RSA key for RS256, …): checking the others fails
// before any arithmetic, so they cost nothing and are not counted.
func fitting(keys []jose.JSONWebKey, alg string) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range keys {
		var fits bool
		switch k.Key.(type) {
		case *rsa.PublicKey:
			fits = strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
		case *ecdsa.PublicKey:
			fits = strings.HasPrefix(alg, "ES")
		case ed25519.PublicKey:
			fits = alg == string(jose.EdDSA)
		}
		if fits {
			out = append(out, k)
		}
	}
	return out
}

var joseAlgs = func() []jose.SignatureAlgorithm {
	out := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, a := range signingAlgs {
		out[i] = jose.SignatureAlgorithm(a)
	}
	return out
}()

// maintain keeps the set fresh before a token is checked against it (or
// against the tokens remembered): it fetches the set again, and waits for
// it, when the set is past its age and the last fetch did not fail;
// starts a fetch in the background when the set nears its age, or is
// past it while the issuer fails; and reads jwks_file again when it has
// changed. Before the first fetch it does nothing: lookup fetches for the
// first token. It returns the set's generation, which moves on whenever a
// key leaves the set.
func (k *keySet) maintain(ctx context.Context, now time.Time) uint64 {
	k.mu.RLock()
	have, expired, renew, failing, gen := k.set != nil, !now.Before(k.expires), !now.Before(k.renew), k.failing, k.gen
	k.mu.RUnlock()
	switch {
	case !have || !renew: // renew comes before expires
		return gen
	case k.file != "":
		k.recheckFile()
	case expired && !failing:
		if nw := noWaitFrom(ctx); nw != nil {
			nw.would = true
			k.refreshInBackground()
			return gen
		}
		k.refreshExpired(ctx)
	default:
		k.refreshInBackground()
		return gen // checked against the keys in hand
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.gen
}

// refreshExpired fetches the set, past its age, unless a fetch another
// request started while this one waited has done it (or failed).
func (k *keySet) refreshExpired(ctx context.Context) {
	k.fetching.Lock()
	k.mu.RLock()
	due := !k.now().Before(k.expires) && !k.failing
	k.mu.RUnlock()
	if !due {
		k.fetching.Unlock()
		return
	}
	err := k.fetchLocked(ctx)
	k.fetching.Unlock()
	k.loaded(err)
}

// refreshInBackground starts a fetch of the set that no request waits
// for, unless one is under way or has renewed the set meanwhile.
func (k *keySet) refreshInBackground() {
	if !k.fetching.TryLock() {
		return // a fetch is under way
	}
	// The goroutine holds the lock taken here, and gives it back.
	go func() {
		k.mu.RLock()
		due := !k.now().Before(k.renew)
		k.mu.RUnlock()
		if !due {
			k.fetching.Unlock()
			return
		}
		// No request waits for it; fetch bounds it by jwksTimeout.
		err := k.fetchLocked(context.Background())
		k.fetching.Unlock()
		k.loaded(err)
	}()
}

// loaded tells a test that a load of the set ended, after k.fetching is
// given back.
func (k *keySet) loaded(err error) {
	if k.onLoad != nil {
		k.onLoad(err)
	}
}

// lookup returns the keys that may have signed a token naming kid,
// fetching the set when it lacks kid and may be fetched again. A token of
// a cached key never waits for a fetch here (maintain may have fetched).
func (k *keySet) lookup(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	if keys := k.cached(kid); len(keys) > 0 {
		return keys, nil
	}
	if k.file != "" {
		return nil, fmt.Errorf("signed by key %q, which jwks_file lacks", kid)
	}
	// One fetch at a time: concurrent requests for unknown keys wait for
	// it (bounded by jwksTimeout) rather than each starting their own.
	nw := noWaitFrom(ctx)
	if nw == nil {
		k.fetching.Lock()
	} else if !k.fetching.TryLock() {
		nw.would = true // a fetch is under way
		return nil, errKeysUnavailable
	}
	if keys := k.cached(kid); len(keys) > 0 {
		k.fetching.Unlock()
		return keys, nil // the fetch just waited for brought it
	}
	// Why a fetch failed (the key set's URL, an address, a TLS or DNS
	// error) is the operator's to read, in the log (fetchLocked), not a
	// caller's: the reason a caller gets says only that it failed.
	if !k.last.IsZero() && k.now().Sub(k.last) < k.every {
		lastErr := k.lastErr
		k.fetching.Unlock()
		if lastErr != nil {
			return nil, errKeysUnavailable
		}
		return nil, fmt.Errorf("signed by key %q, which the issuer does not publish", kid)
	}
	if nw != nil {
		// The fetch goes on without this request, which says it would
		// have waited; the lock taken here goes with the fetch.
		nw.would = true
		go func() {
			err := k.fetchLocked(context.Background()) // bounded by jwksTimeout
			k.fetching.Unlock()
			k.loaded(err)
		}()
		return nil, errKeysUnavailable
	}
	err := k.fetchLocked(ctx)
	k.fetching.Unlock()
	k.loaded(err)
	if err != nil {
		if k.cached("") == nil {
			return nil, errKeysUnavailable
		}
		return nil, fmt.Errorf("signed by key %q, not among the cached keys, and the issuer's keys could not be fetched again (the server's log says why)", kid)
	}
	if keys := k.cached(kid); len(keys) > 0 {
		return keys, nil
	}
	return nil, fmt.Errorf("signed by key %q, which the issuer does not publish", kid)
}

// noWait, in a request's context (Verifier.VerifyNow), asks the key set
// not to make the request wait for a fetch: where it would, it starts the
// fetch in the background and sets would.
type noWait struct{ would bool }

type noWaitKey struct{}

func noWaitFrom(ctx context.Context) *noWait {
	nw, _ := ctx.Value(noWaitKey{}).(*noWait)
	return nw
}

// errKeysUnavailable is the reason a caller gets when its token needs keys
// that could not be fetched; the log says why.
var errKeysUnavailable = errors.New("the issuer's keys could not be fetched (the server's log says why)")

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

// fetchLocked fetches the set and puts it in place; k.fetching is held.
// A failed fetch leaves the set as it was, marked failing, to be fetched
// again in the background every k.every.
func (k *keySet) fetchLocked(ctx context.Context) error {
	now := k.now()
	k.last = now
	set, age, err := k.fetch(ctx)
	k.lastErr = err
	if err != nil {
		k.mu.Lock()
		stale, was := k.set != nil, k.failing
		k.failing, k.renew = true, now.Add(k.every)
		k.mu.Unlock()
		switch {
		case stale && !was:
			k.log.Warn("the OIDC issuer's keys could not be fetched again: the keys fetched before stay in use, and are fetched again every "+k.every.String(),
				"issuer", k.issuer, "error", err)
		case !was:
			k.log.Warn("the OIDC issuer's keys could not be fetched: JWTs are refused until they are, fetched again at most every "+k.every.String(),
				"issuer", k.issuer, "error", err)
		default:
			k.log.Debug("the OIDC issuer's keys could not be fetched again", "issuer", k.issuer, "error", err)
		}
	} else {
		k.install(set, now.Add(age), now.Add(age-age/4))
	}
	return err
}

// install puts set in place, to be fetched again past expires (in the
// background past renew), moving the generation on when a key left.
func (k *keySet) install(set *jose.JSONWebKeySet, expires, renew time.Time) {
	k.mu.Lock()
	gone := removedKeys(k.set, set)
	if len(gone) > 0 {
		k.gen++
	}
	k.set, k.failing, k.expires, k.renew = set, false, expires, renew
	k.mu.Unlock()
	if len(gone) > 0 {
		k.log.Info("the OIDC issuer no longer publishes these keys: tokens they signed are refused", "issuer", k.issuer, "kids", gone)
	}
}

// removedKeys returns the IDs of the keys of old that new lacks (a key
// whose ID stays but whose material changed counts as removed); "" names
// a key without an ID.
func removedKeys(old, new *jose.JSONWebKeySet) []string {
	if old == nil {
		return nil
	}
	kept := make(map[string]bool, len(new.Keys))
	for _, key := range new.Keys {
		if tp, err := key.Thumbprint(crypto.SHA256); err == nil {
			kept[key.KeyID+"/"+string(tp)] = true
		}
	}
	var gone []string
	for _, key := range old.Keys {
		tp, err := key.Thumbprint(crypto.SHA256)
		if err != nil || !kept[key.KeyID+"/"+string(tp)] {
			gone = append(gone, key.KeyID)
		}
	}
	return gone
}

// fetch reads the key set (after discovery, the first time, when no JWKS
// URL is configured), within jwksTimeout, and how long it may be used.
func (k *keySet) fetch(ctx context.Context) (*jose.JSONWebKeySet, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksTimeout)
	defer cancel()
	if k.jwksURL == "" {
		var disc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if _, err := k.getJSON(ctx, strings.TrimSuffix(k.issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
			return nil, 0, fmt.Errorf("discovery: %w", err)
		}
		if disc.Issuer != k.issuer {
			return nil, 0, fmt.Errorf("discovery: the document is of issuer %q, not %q", disc.Issuer, k.issuer)
		}
		if disc.JWKSURI == "" {
			return nil, 0, errors.New("discovery: the document names no jwks_uri")
		}
		if u, err := url.Parse(disc.JWKSURI); err != nil || !secureURL(u) {
			return nil, 0, fmt.Errorf("discovery: jwks_uri %q: want an https URL (http only on loopback)", redact.URL(disc.JWKSURI))
		}
		k.jwksURL = disc.JWKSURI
	}
	var set jose.JSONWebKeySet
	h, err := k.getJSON(ctx, k.jwksURL, &set)
	if err != nil {
		return nil, 0, err
	}
	return &set, cacheAge(h), nil
}

// cacheAge is how long a key set fetched with the response header h may
// be used: its Cache-Control max-age less its Age, or jwksDefaultAge
// without one; jwksMinAge for no-cache or no-store; always within
// [jwksMinAge, jwksMaxAge].
func cacheAge(h http.Header) time.Duration {
	age := jwksDefaultAge
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(strings.ToLower(strings.TrimSpace(d)), "=")
			switch name {
			case "no-cache", "no-store":
				return jwksMinAge
			case "max-age":
				if n, err := strconv.ParseUint(strings.Trim(val, `"`), 10, 32); err == nil {
					age = time.Duration(n) * time.Second
				}
			}
		}
	}
	if n, err := strconv.ParseUint(h.Get("Age"), 10, 32); err == nil {
		age -= time.Duration(n) * time.Second
	}
	return min(max(age, jwksMinAge), jwksMaxAge)
}

func (k *keySet) getJSON(ctx context.Context, url string, v any) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("GET %s: no answer within %s", url, jwksTimeout)
		}
		return nil, fmt.Errorf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return nil, fmt.Errorf("GET %s: %v", url, err)
	}
	return resp.Header, nil
}

// readFile reads the set from jwks_file; k.fetching is held, or k is
// not yet shared.
func (k *keySet) readFile() error {
	seen, err := follow.Look(k.file)
	if err != nil {
		return err
	}
	b, err := follow.ReadFile(k.file)
	if err != nil {
		return err
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
		return fmt.Errorf("%s: not a JSON Web Key Set with keys (%v)", k.file, err)
	}
	k.fileSeen = seen
	k.install(&set, time.Time{}, k.now().Add(jwksFileRecheck))
	return nil
}

// recheckFile reads jwks_file again when it has changed since it was
// read. A file that cannot be read or holds no key set leaves the keys
// read before in use (it may be half-written), and is looked at again
// jwksFileRecheck later.
func (k *keySet) recheckFile() {
	k.fetching.Lock()
	now := k.now()
	k.mu.Lock()
	if now.Before(k.renew) {
		k.mu.Unlock()
		k.fetching.Unlock()
		return // looked at meanwhile
	}
	k.renew = now.Add(jwksFileRecheck)
	k.mu.Unlock()
	seen, err := follow.Look(k.file)
	if err == nil && seen.Same(k.fileSeen) {
		k.fetching.Unlock()
		return
	}
	if err == nil {
		err = k.readFile()
	}
	k.fetching.Unlock()
	if err != nil {
		k.log.Warn("auth.oidc.jwks_file could not be read again: the keys read before stay in use", "file", k.file, "error", err)
	}
	k.loaded(err)
}
