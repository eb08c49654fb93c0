// Package testoidc is an OpenID Connect issuer for tests: a real HTTP
// server on loopback serving discovery and a JSON Web Key Set, whose keys
// sign the tokens a test asks for. A test can rotate or remove its keys,
// say how long the key set may be cached, take its key endpoint down or
// make it hang, and count how often the keys were fetched.
package testoidc

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Issuer is a running test issuer.
type Issuer struct {
	URL string // its issuer URL, what tokens carry as "iss"

	mu        sync.Mutex
	keys      map[string]key // every key it can sign with, by key ID
	published []string       // the key IDs its JWKS lists
	mode      string         // "", "down" (503) or "hang" (until the test ends)
	cache     string         // the key set's Cache-Control header, when set
	fetches   atomic.Int32
	release   chan struct{}
	srv       *httptest.Server
}

type key struct {
	priv crypto.Signer
	alg  jose.SignatureAlgorithm
}

// New starts an issuer with one published RS256 key, "rsa-1", and one
// ES256 key, "ec-1".
func New(t testing.TB) *Issuer {
	t.Helper()
	return start(t, (*httptest.Server).Start)
}

// NewTLS starts an issuer as New does that serves HTTPS with the
// certificate getCert gives for each connection (a test can rotate it).
func NewTLS(t testing.TB, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *Issuer {
	t.Helper()
	return start(t, func(srv *httptest.Server) {
		// httptest adds its own certificate to Certificates, which
		// crypto/tls prefers to GetCertificate for a client that sends no
		// server name (one dialling an IP address): a config per
		// connection presents getCert's alone.
		srv.TLS = &tls.Config{GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := getCert(hello)
			if err != nil {
				return nil, err
			}
			return &tls.Config{Certificates: []tls.Certificate{*c}}, nil
		}}
		srv.StartTLS()
	})
}

func start(t testing.TB, run func(*httptest.Server)) *Issuer {
	t.Helper()
	iss := &Issuer{keys: map[string]key{}, release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": iss.URL, "jwks_uri": iss.URL + "/keys"})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		iss.fetches.Add(1)
		iss.mu.Lock()
		mode, cache := iss.mode, iss.cache
		var set jose.JSONWebKeySet
		for _, kid := range iss.published {
			k := iss.keys[kid]
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: kid, Algorithm: string(k.alg), Use: "sig"})
		}
		iss.mu.Unlock()
		switch mode {
		case "down":
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
			return
		case "hang":
			select {
			case <-iss.release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if cache != "" {
			w.Header().Set("Cache-Control", cache)
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	srv := httptest.NewUnstartedServer(mux)
	run(srv)
	iss.srv = srv
	t.Cleanup(func() {
		close(iss.release)
		srv.Close()
	})
	iss.URL = srv.URL
	iss.AddKey(t, "rsa-1", jose.RS256, true)
	iss.AddKey(t, "ec-1", jose.ES256, true)
	return iss
}

// AddKey makes a new key of alg (RS256 or ES256) named kid, published in
// the JWKS or not.
func (iss *Issuer) AddKey(t testing.TB, kid string, alg jose.SignatureAlgorithm, publish bool) {
	t.Helper()
	var priv crypto.Signer
	var err error
	switch alg {
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		t.Fatal(err)
	}
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.keys[kid] = key{priv: priv, alg: alg}
	if publish {
		iss.published = append(iss.published, kid)
	}
}

// Publish makes the JWKS list exactly kids (a rotation).
func (iss *Issuer) Publish(kids ...string) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.published = kids
}

// CacheControl makes the key set's responses carry the header
// "Cache-Control: v" ("max-age=120"); "" sends none.
func (iss *Issuer) CacheControl(v string) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.cache = v
}

// Down makes the key endpoint answer 503; Hang makes it answer nothing
// until the test ends; Up restores it.
func (iss *Issuer) Down() { iss.setMode("down") }
func (iss *Issuer) Hang() { iss.setMode("hang") }
func (iss *Issuer) Up()   { iss.setMode("") }

// DropConnections closes the clients' connections, so that their next
// request connects (and, over TLS, checks the certificate) anew.
func (iss *Issuer) DropConnections() { iss.srv.CloseClientConnections() }

func (iss *Issuer) setMode(m string) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.mode = m
}

// Fetches is how often the key set was asked for.
func (iss *Issuer) Fetches() int { return int(iss.fetches.Load()) }

// Claims are a token's claims; Token fills "iss", "iat" and "exp" (an hour
// on) when they are absent.
type Claims map[string]any

// Token returns a compact JWT of claims signed with the key kid.
func (iss *Issuer) Token(t testing.TB, kid string, claims Claims) string {
	t.Helper()
	iss.mu.Lock()
	k, ok := iss.keys[kid]
	iss.mu.Unlock()
	if !ok {
		t.Fatalf("no key %q", kid)
	}
	c := Claims{"iss": iss.URL, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for name, v := range claims {
		if v == nil {
			delete(c, name)
			continue
		}
		c[name] = v
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
