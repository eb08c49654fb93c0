package mcpsource

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
)

// authServer is an OAuth authorization server written for these tests:
// RFC 8414 metadata and a token endpoint for the client credentials grant
// of one client, tokens for one resource, each valid for lifetime, any of
// them revocable.
type authServer struct {
	*httptest.Server
	clientID, secret, resource string
	lifetime                   time.Duration

	mu       sync.Mutex
	metadata int                  // GETs of the metadata
	issued   map[string]time.Time // token → expiry
	revoked  map[string]bool
	requests []tokenRequest
}

type tokenRequest struct {
	grant, clientID, resource, scope string
	ok                               bool
}

func newAuthServer(t *testing.T, clientID, secret string, lifetime time.Duration) *authServer {
	as := &authServer{clientID: clientID, secret: secret, lifetime: lifetime, issued: map[string]time.Time{}, revoked: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		as.mu.Lock()
		as.metadata++
		as.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": as.URL, "token_endpoint": as.URL + "/token",
			"grant_types_supported":                 []string{"client_credentials"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic"},
			"response_types_supported":              []string{},
		})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		id, secret, basic := r.BasicAuth()
		req := tokenRequest{grant: r.Form.Get("grant_type"), clientID: id, resource: r.Form.Get("resource"), scope: r.Form.Get("scope")}
		w.Header().Set("Content-Type", "application/json")
		as.mu.Lock()
		defer func() {
			as.requests = append(as.requests, req)
			as.mu.Unlock()
		}()
		switch {
		case !basic || id != as.clientID || secret != as.secret:
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client", "error_description": "unknown client or wrong secret"})
		case req.grant != "client_credentials":
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": "unsupported_grant_type"})
		case req.resource != as.resource:
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": "invalid_target"})
		default:
			b := make([]byte, 16)
			rand.Read(b)
			tok := hex.EncodeToString(b)
			as.issued[tok] = time.Now().Add(as.lifetime)
			req.ok = true
			json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(as.lifetime.Seconds())})
		}
	})
	as.Server = httptest.NewServer(mux)
	t.Cleanup(as.Close)
	return as
}

// verify is the MCP server's auth.TokenVerifier: a token this server
// issued, not revoked. Expiry is the middleware's check.
func (as *authServer) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	exp, ok := as.issued[token]
	if !ok || as.revoked[token] {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{Scopes: []string{"tools"}, Expiration: exp}, nil
}

func (as *authServer) revokeAll() {
	as.mu.Lock()
	defer as.mu.Unlock()
	for tok := range as.issued {
		as.revoked[tok] = true
	}
}

func (as *authServer) tokenRequests() []tokenRequest {
	as.mu.Lock()
	defer as.mu.Unlock()
	return append([]tokenRequest(nil), as.requests...)
}

// protectedMCP is a go-sdk MCP server behind auth.RequireBearerToken, with
// its protected resource metadata naming as, and one tool that says which
// token called it.
func protectedMCP(t *testing.T, as *authServer) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "protected"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "scopes " + strings.Join(req.Extra.TokenInfo.Scopes, " ")}}}, nil, nil
	})
	mux := http.NewServeMux()
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	endpoint := web.URL + "/mcp"
	as.resource = endpoint
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: endpoint, AuthorizationServers: []string{as.URL}, ScopesSupported: []string{"tools"},
	}))
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux.Handle("/mcp", auth.RequireBearerToken(as.verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: web.URL + "/.well-known/oauth-protected-resource/mcp",
	})(mcpHandler))
	return endpoint
}

// TestOAuth signs in to an MCP server behind OAuth with client
// credentials found by discovery, and keeps calling it as tokens expire
// and are revoked.
func TestOAuth(t *testing.T) {
	t.Setenv("TW_MCP_SECRET", "s3cret")
	as := newAuthServer(t, "toolwire", "s3cret", time.Hour)
	endpoint := protectedMCP(t, as)
	g, reg := newGateway(t)
	cfg := ServerConfig{Name: "p", URL: endpoint, OAuth: &OAuthConfig{ClientID: "toolwire", ClientSecret: "{{TW_MCP_SECRET}}"}}
	if err := g.Sync(t.Context(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the protected server's tools", sourcetest.Has("p_whoami"))
	if res := call(t, t.Context(), snap, "p_whoami", `{}`, nil); res.IsError || text(res) != "scopes tools" {
		t.Errorf("whoami: %s", text(res))
	}
	reqs := as.tokenRequests()
	if len(reqs) != 1 || !reqs[0].ok || reqs[0].grant != "client_credentials" || reqs[0].resource != endpoint || reqs[0].scope != "tools" {
		t.Errorf("token requests %+v; want one client_credentials grant for %s with the metadata's scope", reqs, endpoint)
	}
	// The token is cached: more calls ask for no other.
	for range 3 {
		if res := call(t, t.Context(), snap, "p_whoami", `{}`, nil); res.IsError {
			t.Errorf("whoami: %s", text(res))
		}
	}
	if n := len(as.tokenRequests()); n != 1 {
		t.Errorf("%d token requests for four calls; want the one token reused", n)
	}

	// Revoked mid-session: the next request gets 401, one new token, and
	// the call goes through.
	as.revokeAll()
	if res := call(t, t.Context(), snap, "p_whoami", `{}`, nil); res.IsError || text(res) != "scopes tools" {
		t.Errorf("whoami after the token was revoked: %s", text(res))
	}
	if reqs := as.tokenRequests(); len(reqs) != 2 || !reqs[1].ok {
		t.Errorf("token requests after a revocation: %+v; want one more", reqs)
	}
}

// TestOAuthExpiry: tokens that expire within the refresh margin are
// fetched again before they are used, mid-session, with no 401 needed.
func TestOAuthExpiry(t *testing.T) {
	t.Setenv("TW_MCP_SECRET_2", "s3cret")
	as := newAuthServer(t, "toolwire", "s3cret", 20*time.Second) // inside refreshEarly: stale at once
	endpoint := protectedMCP(t, as)
	g, reg := newGateway(t)
	cfg := ServerConfig{Name: "p", URL: endpoint, OAuth: &OAuthConfig{ClientID: "toolwire", ClientSecret: "{{TW_MCP_SECRET_2}}", Issuer: as.URL, Scopes: []string{"tools", "extra"}}}
	if err := g.Sync(t.Context(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the protected server's tools", sourcetest.Has("p_whoami"))
	before := len(as.tokenRequests())
	for range 3 {
		if res := call(t, t.Context(), snap, "p_whoami", `{}`, nil); res.IsError {
			t.Errorf("whoami: %s", text(res))
		}
	}
	reqs := as.tokenRequests()
	if len(reqs)-before < 3 {
		t.Errorf("%d token requests for three calls with tokens about to expire; want a new one for each", len(reqs)-before)
	}
	for _, r := range reqs {
		if !r.ok || r.scope != "tools extra" || r.resource != endpoint {
			t.Errorf("token request %+v; want the configured scopes and the server's resource", r)
		}
	}
}

// TestOAuthWrongSecret: a refused client is a clear error, the server
// offers no tools, and it is retried with backoff; the right secret (after
// a reload) gets in.
func TestOAuthWrongSecret(t *testing.T) {
	t.Setenv("TW_MCP_SECRET_3", "wrong")
	as := newAuthServer(t, "toolwire", "s3cret", time.Hour)
	endpoint := protectedMCP(t, as)
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	g := New(reg, slog.New(slog.NewJSONHandler(logs, nil)))
	g.set.MinBackoff, g.set.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { g.Close() })
	cfg := ServerConfig{Name: "p", URL: endpoint, OAuth: &OAuthConfig{ClientID: "toolwire", ClientSecret: "{{TW_MCP_SECRET_3}}"}}
	if err := g.Sync(t.Context(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for strings.Count(logs.String(), "MCP server unavailable") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no retries logged:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "invalid_client: unknown client or wrong secret (check client_id and client_secret)") {
		t.Errorf("the log does not say why the server is down:\n%s", logs)
	}
	if strings.Contains(logs.String(), "wrong\"") || strings.Contains(logs.String(), "s3cret") {
		t.Errorf("a secret is in the log:\n%s", logs)
	}
	if names := reg.Snapshot().Names(); len(names) != 0 {
		t.Errorf("tools offered without signing in: %v", names)
	}
	t.Setenv("TW_MCP_SECRET_3", "s3cret")
	sourcetest.WaitTools(t, reg, "the tools once the secret is right", sourcetest.Has("p_whoami"))
}

// TestOAuthTokenURL: with token_url there is no discovery, and the first
// request already carries a token.
func TestOAuthTokenURL(t *testing.T) {
	t.Setenv("TW_MCP_SECRET_4", "s3cret")
	as := newAuthServer(t, "toolwire", "s3cret", time.Hour)
	endpoint := protectedMCP(t, as)
	g, reg := newGateway(t)
	cfg := ServerConfig{Name: "p", URL: endpoint, OAuth: &OAuthConfig{ClientID: "toolwire", ClientSecret: "{{TW_MCP_SECRET_4}}", TokenURL: as.URL + "/token"}}
	if err := g.Sync(t.Context(), []ServerConfig{cfg}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the protected server's tools", sourcetest.Has("p_whoami"))
	if res := call(t, t.Context(), snap, "p_whoami", `{}`, nil); res.IsError {
		t.Errorf("whoami: %s", text(res))
	}
	as.mu.Lock()
	metadata := as.metadata
	as.mu.Unlock()
	if reqs := as.tokenRequests(); len(reqs) != 1 || !reqs[0].ok || reqs[0].resource != endpoint || metadata != 0 {
		t.Errorf("token requests %+v, %d metadata reads; want one token for %s and no discovery", reqs, metadata, endpoint)
	}
}

func TestOAuthValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  ServerConfig
		want string
	}{
		{ServerConfig{Name: "a", Command: "x", OAuth: &OAuthConfig{ClientID: "c", ClientSecret: "{{S}}"}}, "oauth is for streamable HTTP servers"},
		{ServerConfig{Name: "a", URL: "http://h/mcp", OAuth: &OAuthConfig{ClientSecret: "{{S}}"}}, "client_id is required"},
		{ServerConfig{Name: "a", URL: "http://h/mcp", OAuth: &OAuthConfig{ClientID: "c"}}, "client_secret is required"},
		{ServerConfig{Name: "a", URL: "http://h/mcp", OAuth: &OAuthConfig{ClientID: "c", ClientSecret: "{{S}}", TokenURL: "http://auth.example/token"}}, "only over https"},
		// A URL it refuses is quoted with its credentials masked.
		{ServerConfig{Name: "a", URL: "http://h/mcp", OAuth: &OAuthConfig{ClientID: "c", ClientSecret: "{{S}}", TokenURL: "http://c:s3cret@auth.example/token"}}, `"http://xxxxx@auth.example/token": credentials go only over https`},
		{ServerConfig{Name: "a", URL: "http://h/mcp", Headers: map[string]string{"authorization": "x"}, OAuth: &OAuthConfig{ClientID: "c", ClientSecret: "{{S}}"}}, "conflicts with oauth"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v): %v; want %q", tc.cfg, err, tc.want)
		}
	}
	ok := ServerConfig{Name: "a", URL: "http://h/mcp", OAuth: &OAuthConfig{ClientID: "c", ClientSecret: "{{S}}", TokenURL: "https://auth.example/token", Issuer: "http://127.0.0.1:9"}}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}

// TestOAuthRedirect: a token endpoint or an authorization server's
// metadata that redirects to another server is not followed, so the
// client secret goes nowhere the config does not name. The server
// redirected to answers as a thief would: metadata naming the issuer asked
// for and a token endpoint of its own.
func TestOAuthRedirect(t *testing.T) {
	t.Setenv("TW_MCP_SECRET_5", "s3cret-5")
	var mu sync.Mutex
	var stolen []string // requests the thief got
	thief := httptest.NewServer(nil)
	t.Cleanup(thief.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, thief.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	thief.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		mu.Lock()
		stolen = append(stolen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+r.Form.Encode())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			json.NewEncoder(w).Encode(map[string]any{"issuer": front.URL, "token_endpoint": thief.URL + "/token"})
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client"})
	})
	for _, tc := range []struct {
		name  string
		oauth OAuthConfig
		to    string // where the refused redirect led
	}{
		{"token_url", OAuthConfig{TokenURL: front.URL + "/token"}, thief.URL + "/token"},
		{"issuer's metadata", OAuthConfig{Issuer: front.URL}, thief.URL + "/.well-known/oauth-authorization-server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as := newAuthServer(t, "toolwire", "s3cret-5", time.Hour)
			endpoint := protectedMCP(t, as)
			g, reg := newGateway(t)
			logs := &logbuf.Buffer{}
			g.log = slog.New(slog.NewTextHandler(logs, nil))
			tc.oauth.ClientID, tc.oauth.ClientSecret = "toolwire", "{{TW_MCP_SECRET_5}}"
			if err := g.Sync(t.Context(), []ServerConfig{{Name: "p", URL: endpoint, OAuth: &tc.oauth}}); err != nil {
				t.Fatal(err)
			}
			for limit := time.Now().Add(waitLimit); strings.Count(logs.String(), "MCP server unavailable") < 2; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(limit) {
					t.Fatalf("no retries logged:\n%s", logs)
				}
			}
			g.Close()
			mu.Lock()
			for _, s := range stolen {
				t.Errorf("the server redirected to got %s", s)
			}
			stolen = nil
			mu.Unlock()
			if want := "refused a redirect to " + tc.to; !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not say %q:\n%s", want, logs)
			}
			if names := reg.Snapshot().Names(); len(names) != 0 {
				t.Errorf("tools: %v", names)
			}
		})
	}
}
