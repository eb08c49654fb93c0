package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/testoidc"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// verdict is what a surface made of a request's credentials: the caller it
// ran as (its whole identity, as describe writes it), or the reason it was
// refused.
type verdict struct {
	Caller string
	Reason string
}

// TestSameCallerOnEveryPort authenticates the same credentials through the
// gRPC interceptors and the HTTP middleware, each over a real listener with
// TLS and one Verifier, and wants the same caller or the same refusal.
func TestSameCallerOnEveryPort(t *testing.T) {
	t.Parallel()
	ca, other := testpki.New(t, "toolwire test CA"), testpki.New(t, "some other CA")
	certFile, keyFile := testpki.WritePEM(t, t.TempDir(), "server", ca.Issue(t, testpki.Server))
	iss := testoidc.New(t)
	v, err := auth.New(auth.Config{ClientCAs: ca.Pool(), Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}},
		Groups:                  map[string][]string{"alice": {"humans", "admins"}, "cert:agent-7": {"agents"}},
		OIDC:                    &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: "oidc:"},
		CertificateCallerPrefix: "cert:"})
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.DiscardHandler)

	creds, err := grpcauth.ServerCredentials(certFile, keyFile, v)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := serve(t, v, nil, grpc.Creds(creds))

	tlsCfg, err := auth.ServerTLS(certFile, keyFile, v)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(auth.RequireCredentials(v, discard)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, describe(engine.IdentityFrom(r.Context())))
	})))
	hs.Listener = tls.NewListener(hs.Listener, tlsCfg)
	hs.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	hs.Start()
	t.Cleanup(hs.Close)
	httpURL := "https://" + hs.Listener.Addr().String() + "/"

	overGRPC := func(t *testing.T, cert []tls.Certificate, authorization []string) verdict {
		conn := dial(t, grpcAddr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: cert}))
		ctx := context.Background()
		for _, a := range authorization {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
		}
		got, err := callTool(ctx, conn, "identity")
		if err != nil {
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("gRPC: %v, want UNAUTHENTICATED or success", err)
			}
			return verdict{Reason: status.Convert(err).Message()}
		}
		return verdict{Caller: got}
	}
	overHTTP := func(t *testing.T, cert []tls.Certificate, authorization []string) verdict {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: cert}}}
		t.Cleanup(c.CloseIdleConnections)
		req, _ := http.NewRequest(http.MethodPost, httpURL, nil)
		for _, a := range authorization {
			req.Header.Add("Authorization", a)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			return verdict{Caller: string(body)}
		}
		var e struct{ Code, Message string }
		if err := json.Unmarshal(body, &e); resp.StatusCode != http.StatusUnauthorized || err != nil || e.Code != "unauthenticated" {
			t.Fatalf("HTTP: %d %s, want 200 or 401 with a Connect error", resp.StatusCode, body)
		}
		return verdict{Reason: e.Message}
	}

	valid := []tls.Certificate{ca.Issue(t, testpki.Client("agent-7"))}
	for _, tc := range []struct {
		name          string
		cert          []tls.Certificate
		authorization []string
		want          verdict // Reason: its start, when it ends in a time
	}{
		{name: "token", authorization: []string{"Bearer " + aliceToken}, want: verdict{Caller: "alice token humans,admins"}},
		{name: "lower-case scheme", authorization: []string{"bearer " + aliceToken}, want: verdict{Caller: "alice token humans,admins"}},
		{name: "client certificate", cert: valid, want: verdict{Caller: "cert:agent-7 certificate agents"}},
		// One name, three callers: the token's, the certificate's and the JWT's.
		{name: "client certificate named like the token", cert: []tls.Certificate{ca.Issue(t, testpki.Client("alice"))}, want: verdict{Caller: "cert:alice certificate "}},
		{name: "token and certificate", cert: valid, authorization: []string{"Bearer " + aliceToken}, want: verdict{Caller: "alice token humans,admins"}},
		{name: "missing", want: verdict{Reason: `missing credentials: send an "authorization: Bearer <token>" header or a client certificate`}},
		{name: "JWT", authorization: []string{"Bearer " + iss.Token(t, "ec-1", testoidc.Claims{"sub": "agent-9", "aud": "toolwire", "groups": []string{"agents"}})},
			want: verdict{Caller: "oidc:agent-9 jwt agents"}},
		{name: "JWT named like the token", authorization: []string{"Bearer " + iss.Token(t, "ec-1", testoidc.Claims{"sub": "alice", "aud": "toolwire"})},
			want: verdict{Caller: "oidc:alice jwt "}},
		{name: "JWT for another audience", authorization: []string{"Bearer " + iss.Token(t, "rsa-1", testoidc.Claims{"sub": "agent-9", "aud": "other"})},
			want: verdict{Reason: `invalid JWT: expected audience "toolwire" got ["other"]`}},
		{name: "invalid token", authorization: []string{"Bearer not-a-token-of-ours-at-all"}, want: verdict{Reason: "invalid bearer token"}},
		{name: "malformed", authorization: []string{"Basic " + aliceToken}, want: verdict{Reason: `malformed authorization header: want "Bearer <token>"`}},
		{name: "two headers", authorization: []string{"Bearer " + aliceToken, "Bearer " + aliceToken}, want: verdict{Reason: "2 authorization headers: send exactly one"}},
		{name: "wrong token, valid certificate", cert: valid, authorization: []string{"Bearer not-a-token-of-ours-at-all"}, want: verdict{Reason: "invalid bearer token"}},
		{name: "certificate of another CA", cert: []tls.Certificate{other.Issue(t, testpki.Client("agent-7"))}, want: verdict{Reason: "client certificate rejected: x509: certificate signed by unknown authority"}},
		{name: "expired certificate", cert: []tls.Certificate{ca.Issue(t, testpki.Client("agent-7", func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		}))}, want: verdict{Reason: "client certificate rejected: x509: certificate has expired or is not yet valid: current time"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, h := overGRPC(t, tc.cert, tc.authorization), overHTTP(t, tc.cert, tc.authorization)
			// The time a certificate was checked at may differ by a second.
			g.Reason, _, _ = strings.Cut(g.Reason, " current time ")
			h.Reason, _, _ = strings.Cut(h.Reason, " current time ")
			if diff := cmp.Diff(g, h); diff != "" {
				t.Errorf("gRPC and HTTP disagree (-gRPC +HTTP):\n%s", diff)
			}
			tc.want.Reason, _, _ = strings.Cut(tc.want.Reason, " current time")
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}
