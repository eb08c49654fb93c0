package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testoidc"
)

func oidcVerifier(t *testing.T, cfg auth.OIDCConfig) *auth.Verifier {
	t.Helper()
	v, err := auth.New(auth.Config{OIDC: &cfg, Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func verifyToken(v *auth.Verifier, token string) (*engine.Identity, error) {
	return v.Verify(context.Background(), auth.Credentials{Authorization: []string{"Bearer " + token}})
}

// TestOIDCIdentity: a JWT of the configured issuer and audience names its
// caller by the configured claim, with its groups and claims, whether
// signed RS256 or ES256; static tokens keep working beside it.
func TestOIDCIdentity(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	v := oidcVerifier(t, auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire"})
	for _, kid := range []string{"rsa-1", "ec-1"} {
		id, err := verifyToken(v, iss.Token(t, kid, testoidc.Claims{"sub": "agent-9", "aud": "toolwire", "groups": []string{"agents", "ci"}}))
		if err != nil || id.ID != "agent-9" || id.Method != engine.MethodJWT || !slices.Equal(id.Groups, []string{"agents", "ci"}) || id.Claims["sub"] != "agent-9" {
			t.Errorf("%s: %+v, %v; want agent-9 by jwt in agents, ci", kid, id, err)
		}
	}
	if id, err := verifyToken(v, aliceToken); err != nil || id.ID != "alice" || id.Method != engine.MethodToken {
		t.Errorf("a static token beside OIDC: %+v, %v", id, err)
	}
	// An audience among several.
	if id, err := verifyToken(v, iss.Token(t, "rsa-1", testoidc.Claims{"sub": "b", "aud": []string{"other", "toolwire"}})); err != nil || id.ID != "b" {
		t.Errorf("audience among several: %+v, %v", id, err)
	}
}

// TestOIDCKubernetesClaims: a Kubernetes service-account token's claims,
// whose object keys hold dots, name the caller and its group by dotted
// paths.
func TestOIDCKubernetesClaims(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	v := oidcVerifier(t, auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire",
		CallerClaim: "kubernetes.io.serviceaccount.name", GroupsClaim: "kubernetes.io.namespace"})
	tok := iss.Token(t, "rsa-1", testoidc.Claims{"aud": []string{"toolwire"}, "sub": "system:serviceaccount:agents:builder",
		"kubernetes.io": map[string]any{"namespace": "agents", "serviceaccount": map[string]any{"name": "builder", "uid": "0b5c"}}})
	id, err := verifyToken(v, tok)
	if err != nil || id.ID != "builder" || !slices.Equal(id.Groups, []string{"agents"}) {
		t.Errorf("service-account token: %+v, %v; want builder in agents", id, err)
	}
}

// TestOIDCRefusals: each bad token is refused with a specific reason that
// never quotes the token.
func TestOIDCRefusals(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	iss.AddKey(t, "unpublished", jose.RS256, false)
	other := testoidc.New(t) // another issuer, with keys of its own
	v := oidcVerifier(t, auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire"})
	ok := testoidc.Claims{"sub": "agent-9", "aud": "toolwire"}
	with := func(extra testoidc.Claims) testoidc.Claims {
		c := testoidc.Claims{}
		for k, v := range ok {
			c[k] = v
		}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	payload, _ := json.Marshal(map[string]any{"iss": iss.URL, "sub": "agent-9", "aud": "toolwire", "exp": time.Now().Add(time.Hour).Unix()})
	algNone := header + "." + base64.RawURLEncoding.EncodeToString(payload) + "."
	for _, c := range []struct {
		name, token, want string
	}{
		{"expired", iss.Token(t, "rsa-1", with(testoidc.Claims{"exp": time.Now().Add(-time.Hour).Unix()})), "invalid JWT: expired at "},
		{"wrong audience", iss.Token(t, "rsa-1", with(testoidc.Claims{"aud": "someone-else"})), `invalid JWT: expected audience "toolwire"`},
		{"no audience", iss.Token(t, "rsa-1", with(testoidc.Claims{"aud": nil})), `invalid JWT: expected audience "toolwire"`},
		{"wrong issuer", iss.Token(t, "rsa-1", with(testoidc.Claims{"iss": "https://evil.example"})), "invalid JWT: id token issued by a different provider"},
		{"alg none", algNone, "invalid JWT: malformed"},
		{"unknown key", iss.Token(t, "unpublished", ok), `signed by key "unpublished", which the issuer does not publish`},
		{"another issuer's key", other.Token(t, "rsa-1", with(testoidc.Claims{"iss": iss.URL})), "signature does not verify with the issuer's keys"},
		{"no caller claim", iss.Token(t, "rsa-1", with(testoidc.Claims{"sub": nil})), `invalid JWT: no string claim "sub" names the caller`},
		{"a signature cut short", iss.Token(t, "rsa-1", ok)[:200] + "x", "invalid JWT:"},
	} {
		_, err := verifyToken(v, c.token)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
			continue
		}
		if parts := strings.Split(c.token, "."); strings.Contains(err.Error(), c.token) || (len(parts) == 3 && len(parts[2]) > 8 && strings.Contains(err.Error(), parts[2])) {
			t.Errorf("%s: the reason quotes the token: %v", c.name, err)
		}
	}
}

// TestOIDCKeyRotation: a token of a key the cache lacks makes the keys be
// fetched again, at most once per refresh interval, so a rotated key works
// and made-up key IDs cannot make the server hammer the issuer.
func TestOIDCKeyRotation(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	v := oidcVerifier(t, auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire"})
	claims := testoidc.Claims{"sub": "a", "aud": "toolwire"}
	if _, err := verifyToken(v, iss.Token(t, "rsa-1", claims)); err != nil {
		t.Fatal(err)
	}
	// Rotation within the interval: not fetched again, and no burst of
	// unknown key IDs is.
	iss.AddKey(t, "rsa-2", jose.RS256, false)
	iss.Publish("rsa-2", "ec-1")
	before := iss.Fetches()
	for i := range 50 {
		iss.AddKey(t, fmt.Sprintf("made-up-%d", i), jose.ES256, false)
		if _, err := verifyToken(v, iss.Token(t, fmt.Sprintf("made-up-%d", i), claims)); err == nil {
			t.Fatal("a token of an unpublished key was accepted")
		}
	}
	if got := iss.Fetches() - before; got > 1 {
		t.Errorf("50 tokens of unknown keys fetched the keys %d times; want at most once per interval", got)
	}
	// Past the interval, the rotated key is fetched and accepted.
	auth.SetJWKSRefresh(v, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if id, err := verifyToken(v, iss.Token(t, "rsa-2", claims)); err != nil || id.ID != "a" {
		t.Errorf("rotated key: %+v, %v", id, err)
	}
}

// TestOIDCIssuerDownOrSlow: with the key endpoint down or hanging, tokens
// of cached keys keep working, and a token of an unknown key is refused
// saying why, after one bounded fetch that other requests do not wait for.
func TestOIDCIssuerDownOrSlow(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	iss.AddKey(t, "rsa-2", jose.RS256, false)
	v := oidcVerifier(t, auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire"})
	auth.SetJWKSRefresh(v, 0)
	claims := testoidc.Claims{"sub": "a", "aud": "toolwire"}
	cached := iss.Token(t, "rsa-1", claims)
	if _, err := verifyToken(v, cached); err != nil {
		t.Fatal(err)
	}

	iss.Down()
	if _, err := verifyToken(v, cached); err != nil {
		t.Errorf("cached key, issuer down: %v", err)
	}
	if _, err := verifyToken(v, iss.Token(t, "rsa-2", claims)); err == nil || !strings.Contains(err.Error(), "could not be fetched again: GET "+iss.URL+"/keys: 503") {
		t.Errorf("unknown key, issuer down: %v", err)
	}

	iss.Hang()
	var wg sync.WaitGroup
	var slowErr error
	wg.Go(func() { _, slowErr = verifyToken(v, iss.Token(t, "rsa-2", claims)) })
	for iss.Fetches() < 3 { // the hanging fetch has begun
		time.Sleep(time.Millisecond)
	}
	if _, err := verifyToken(v, cached); err != nil {
		t.Errorf("cached key while a fetch hangs: %v", err)
	}
	wg.Wait()
	if slowErr == nil || !strings.Contains(slowErr.Error(), "no answer within 2s") {
		t.Errorf("unknown key, issuer hanging: %v; want it refused after the bounded fetch", slowErr)
	}
}

// TestOIDCConfig: what a configuration must say, and a key set read from a
// file instead of fetched.
func TestOIDCConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  auth.OIDCConfig
		want string
	}{
		{auth.OIDCConfig{Audience: "a"}, "auth.oidc.issuer is required"},
		{auth.OIDCConfig{Issuer: "https://i.example"}, "auth.oidc.audience is required"},
		{auth.OIDCConfig{Issuer: "http://i.example", Audience: "a"}, "want an https URL (http only on loopback)"},
		{auth.OIDCConfig{Issuer: "https://i.example", Audience: "a", JWKSURL: "https://i.example/k", JWKSFile: "k.json"}, "exclusive"},
		{auth.OIDCConfig{Issuer: "https://i.example", Audience: "a", JWKSFile: filepath.Join(t.TempDir(), "missing.json")}, "auth.oidc.jwks_file"},
	} {
		if _, err := auth.New(auth.Config{OIDC: &c.cfg}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error containing %q", c.cfg, err, c.want)
		}
	}

	iss := testoidc.New(t)
	set, err := json.Marshal(fetchKeys(t, iss.URL+"/keys"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, set, 0o600); err != nil {
		t.Fatal(err)
	}
	v := oidcVerifier(t, auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", JWKSFile: file})
	before := iss.Fetches()
	if id, err := verifyToken(v, iss.Token(t, "ec-1", testoidc.Claims{"sub": "f", "aud": "toolwire"})); err != nil || id.ID != "f" {
		t.Errorf("keys from a file: %+v, %v", id, err)
	}
	if iss.Fetches() != before {
		t.Error("keys from a file were fetched anyway")
	}
}

func fetchKeys(t *testing.T, url string) jose.JSONWebKeySet {
	t.Helper()
	resp, err := httpGet(url)
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(resp, &set); err != nil {
		t.Fatal(err)
	}
	return set
}

func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// TestResourceMetadata: with OIDC on, the HTTP middleware's 401 names the
// protected resource metadata, as the MCP authorization spec asks, and
// that document names the issuer; a JWT then passes the middleware.
func TestResourceMetadata(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	v := oidcVerifier(t, auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire"})
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireCredentials(v, discard)(whoami(&calls)))
	mux.Handle(auth.ResourceMetadataPath, auth.ResourceMetadata(v))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL+"/mcp", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantChallenge := `Bearer resource_metadata="` + srv.URL + auth.ResourceMetadataPath + `"`
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != wantChallenge {
		t.Fatalf("no token: %d %q; want 401 %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), wantChallenge)
	}
	body, err := httpGet(srv.URL + auth.ResourceMetadataPath)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.Unmarshal(body, &meta); err != nil || meta.Resource != srv.URL+"/mcp" || !slices.Equal(meta.AuthorizationServers, []string{iss.URL}) {
		t.Errorf("metadata %s (%v); want resource %s/mcp, authorization server %s", body, err, srv.URL, iss.URL)
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+iss.Token(t, "rsa-1", testoidc.Claims{"sub": "agent-9", "aud": "toolwire"}))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != "caller=agent-9" {
		t.Errorf("with a JWT: %d %s", resp.StatusCode, got)
	}
	// Without OIDC, no metadata and a plain challenge.
	if auth.ResourceMetadata(mustNew(t, auth.Config{Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})) != nil {
		t.Error("metadata without OIDC")
	}
}

// BenchmarkVerify is the cost of checking one request's bearer token: a
// static token against one of one configured, and a JWT of cached keys
// (RS256 2048-bit, ES256), the work OIDC adds per request: from the
// verified-token cache, and checked afresh (-uncached).
//
//	go test ./auth -run '^$' -bench Verify -count 6 | tee verify.txt && benchstat verify.txt
func BenchmarkVerify(b *testing.B) {
	iss := testoidc.New(b)
	cfg := auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire"}
	v, err := auth.New(auth.Config{OIDC: &cfg, Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	if err != nil {
		b.Fatal(err)
	}
	claims := testoidc.Claims{"sub": "agent-9", "aud": "toolwire", "groups": []string{"agents"}}
	for _, c := range []struct{ name, token string }{
		{"static", aliceToken},
		{"jwt-rs256", iss.Token(b, "rsa-1", claims)},
		{"jwt-es256", iss.Token(b, "ec-1", claims)},
	} {
		creds := auth.Credentials{Authorization: []string{"Bearer " + c.token}}
		if _, err := v.Verify(context.Background(), creds); err != nil { // the keys are fetched here, once
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(context.Background(), creds); err != nil {
					b.Fatal(err)
				}
			}
		})
		if c.name == "static" {
			continue
		}
		b.Run(c.name+"-uncached", func(b *testing.B) { // the signature checked on every request
			b.ReportAllocs()
			for b.Loop() {
				auth.ForgetVerifiedTokens(v)
				if _, err := v.Verify(context.Background(), creds); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
