package auth_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/testpki"
)

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	ca, other := testpki.New(t, "toolwire test CA"), testpki.New(t, "some other CA")
	chain := func(c *testpki.CA, edit func(*x509.Certificate)) []*x509.Certificate {
		return []*x509.Certificate{c.Issue(t, edit).Leaf}
	}
	tokens := []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}, {Name: "bob", Hash: auth.HashToken(bobToken)}}
	verifier := func(cfg auth.Config) *auth.Verifier {
		v, err := auth.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var (
		off       = verifier(auth.Config{})
		byToken   = verifier(auth.Config{Tokens: tokens})
		byCert    = verifier(auth.Config{ClientCAs: ca.Pool()})
		groups    = map[string][]string{"alice": {"admins", "humans"}, "cert:agent-7": {"agents"}}
		byEither  = verifier(auth.Config{Tokens: tokens, ClientCAs: ca.Pool(), Groups: groups, CertificateCallerPrefix: "cert:"})
		bearer    = func(s string) []string { return []string{s} }
		agent7    = chain(ca, testpki.Client("agent-7"))
		checked   = byCert.CheckCertificate(agent7)
		neverSeen = auth.Certificate{}
	)
	for _, tc := range []struct {
		name    string
		v       *auth.Verifier
		creds   auth.Credentials
		want    string // the caller, or
		wantErr string // the start of the reason
	}{
		{name: "off: no credentials", v: off, want: ""},
		{name: "off: any token", v: off, creds: auth.Credentials{Authorization: bearer("Bearer whatever")}, want: ""},

		{name: "token: valid", v: byToken, creds: auth.Credentials{Authorization: bearer("Bearer " + aliceToken)}, want: "alice"},
		{name: "token: lower-case scheme", v: byToken, creds: auth.Credentials{Authorization: bearer("bearer " + bobToken)}, want: "bob"},
		{name: "token: invalid", v: byToken, creds: auth.Credentials{Authorization: bearer("Bearer not-a-token-of-ours-at-all")}, wantErr: "invalid bearer token"},
		{name: "token: missing", v: byToken, wantErr: `missing credentials: send an "authorization: Bearer <token>" header`},
		{name: "token: not bearer", v: byToken, creds: auth.Credentials{Authorization: bearer("Basic " + aliceToken)}, wantErr: "malformed authorization header"},
		{name: "token: empty bearer", v: byToken, creds: auth.Credentials{Authorization: bearer("Bearer ")}, wantErr: "malformed authorization header"},
		{name: "token: bearer and spaces", v: byToken, creds: auth.Credentials{Authorization: bearer("Bearer   ")}, wantErr: "malformed authorization header"},
		{name: "token: bearer and a tab", v: byToken, creds: auth.Credentials{Authorization: bearer("Bearer \t")}, wantErr: "malformed authorization header"},
		{name: "token: bearer alone", v: byToken, creds: auth.Credentials{Authorization: bearer("Bearer")}, wantErr: "malformed authorization header"},
		{name: "token: two, both valid", v: byToken, creds: auth.Credentials{Authorization: []string{"Bearer " + aliceToken, "Bearer " + bobToken}}, wantErr: "2 authorization headers"},
		{name: "token: a certificate is no token", v: byToken, creds: auth.Credentials{PeerCertificates: agent7}, wantErr: "missing credentials"},

		{name: "certificate: valid, unchecked", v: byCert, creds: auth.Credentials{PeerCertificates: agent7}, want: "agent-7"},
		{name: "certificate: valid, checked per connection", v: byCert, creds: auth.Credentials{Certificate: checked}, want: "agent-7"},
		{name: "certificate: SPIFFE ID", v: byCert, creds: auth.Credentials{PeerCertificates: chain(ca, testpki.Client("", func(c *x509.Certificate) {
			c.URIs = []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/agent"}}
		}))}, want: "spiffe://example.org/agent"},
		{name: "certificate: DNS name", v: byCert, creds: auth.Credentials{PeerCertificates: chain(ca, testpki.Client("", func(c *x509.Certificate) {
			c.DNSNames = []string{"agent.example.org"}
		}))}, want: "agent.example.org"},
		{name: "certificate: a URI as common name", v: byCert, creds: auth.Credentials{PeerCertificates: chain(ca, testpki.Client("spiffe://example.org/agent"))},
			wantErr: `client certificate rejected: the certificate's common name "spiffe://example.org/agent" is a URI its URI SANs do not hold`},
		{name: "certificate: a URI as common name and URI SAN", v: byCert, creds: auth.Credentials{PeerCertificates: chain(ca, testpki.Client("spiffe://example.org/agent", func(c *x509.Certificate) {
			c.URIs = []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/agent"}}
		}))}, want: "spiffe://example.org/agent"},
		{name: "certificate: names nobody", v: byCert, creds: auth.Credentials{PeerCertificates: chain(ca, testpki.Client(""))}, wantErr: "client certificate rejected: the certificate names nobody"},
		{name: "certificate: expired", v: byCert, creds: auth.Credentials{PeerCertificates: chain(ca, testpki.Client("agent-7", func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		}))}, wantErr: "client certificate rejected: x509: certificate has expired"},
		{name: "certificate: wrong CA", v: byCert, creds: auth.Credentials{PeerCertificates: chain(other, testpki.Client("agent-7"))}, wantErr: "client certificate rejected: x509: certificate signed by unknown authority"},
		{name: "certificate: a server's", v: byCert, creds: auth.Credentials{PeerCertificates: chain(ca, testpki.Server)}, wantErr: "client certificate rejected: x509: certificate specifies an incompatible key usage"},
		{name: "certificate: missing", v: byCert, creds: auth.Credentials{Certificate: neverSeen}, wantErr: "missing credentials: connect with a client certificate signed by the server's client CA"},
		{name: "certificate: a token is no certificate", v: byCert, creds: auth.Credentials{Authorization: bearer("Bearer " + aliceToken)}, wantErr: "this server does not accept bearer tokens"},

		{name: "both: token", v: byEither, creds: auth.Credentials{Authorization: bearer("Bearer " + aliceToken)}, want: "alice"},
		{name: "both: certificate", v: byEither, creds: auth.Credentials{PeerCertificates: agent7}, want: "cert:agent-7"},
		{name: "both: certificate checked per connection", v: byEither, creds: auth.Credentials{Certificate: byEither.CheckCertificate(agent7)}, want: "cert:agent-7"},
		{name: "both: the token decides", v: byEither, creds: auth.Credentials{Authorization: bearer("Bearer " + bobToken), PeerCertificates: agent7}, want: "bob"},
		{name: "both: a wrong token beats a valid certificate", v: byEither, creds: auth.Credentials{Authorization: bearer("Bearer not-a-token-of-ours-at-all"), Certificate: checked}, wantErr: "invalid bearer token"},
		{name: "both: missing", v: byEither, wantErr: `missing credentials: send an "authorization: Bearer <token>" header or a client certificate`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.v.Verify(context.Background(), tc.creds)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Errorf("Verify = %+v, %v; want an error starting %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.ID != tc.want {
				t.Fatalf("Verify = %+v, %v; want %q", got, err, tc.want)
			}
			// How the caller authenticated, and its groups (configured for
			// byEither only), go with its name.
			method := engine.MethodCertificate
			switch {
			case tc.v == off:
				method = ""
			case len(tc.creds.Authorization) > 0:
				method = engine.MethodToken
			}
			var wantGroups []string
			if tc.v == byEither {
				wantGroups = groups[tc.want]
			}
			if got.Method != method || !slices.Equal(got.Groups, wantGroups) {
				t.Errorf("Verify = %+v; want method %q, groups %q", got, method, wantGroups)
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		cfg          auth.Config
		enabled, crt bool
	}{
		{"nothing", auth.Config{}, false, false},
		{"tokens", auth.Config{Tokens: []auth.Token{{Name: "a", Hash: auth.HashToken(aliceToken)}}}, true, false},
		{"client CAs", auth.Config{ClientCAs: testpki.New(t, "ca").Pool()}, true, true},
	} {
		v, err := auth.New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if v.Enabled() != tc.enabled || v.AcceptsCertificates() != tc.crt {
			t.Errorf("%s: Enabled %v, AcceptsCertificates %v; want %v, %v", tc.name, v.Enabled(), v.AcceptsCertificates(), tc.enabled, tc.crt)
		}
	}
}

func TestNewRejectsBadTokens(t *testing.T) {
	t.Parallel()
	h := auth.HashToken(aliceToken)
	for name, toks := range map[string][]auth.Token{
		"no name":      {{Hash: h}},
		"no prefix":    {{Name: "a", Hash: strings.TrimPrefix(h, "sha256:")}},
		"short hex":    {{Name: "a", Hash: h[:len(h)-2]}},
		"not hex":      {{Name: "a", Hash: h[:len(h)-2] + "zz"}},
		"same token":   {{Name: "a", Hash: h}, {Name: "b", Hash: h}},
		"upper prefix": {{Name: "a", Hash: "SHA256:" + strings.TrimPrefix(h, "sha256:")}},
		// printf %s "$TOKEN" | sha256sum with TOKEN unset: "Bearer " and
		// a space would be that caller.
		"the empty token": {{Name: "a", Hash: auth.HashToken("")}},
	} {
		if _, err := auth.New(auth.Config{Tokens: toks}); err == nil {
			t.Errorf("%s: New accepted %v", name, toks)
		}
	}
	// Two tokens of one name serve rotation.
	if _, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "a", Hash: h}, {Name: "a", Hash: auth.HashToken(bobToken)}}}); err != nil {
		t.Errorf("two tokens for one name: %v", err)
	}
}

func TestHashTokenIsWhatSha256sumPrints(t *testing.T) {
	t.Parallel()
	// printf %s "secret" | sha256sum
	const want = "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
	if got := auth.HashToken("secret"); got != want {
		t.Errorf("HashToken(secret) = %s, want %s", got, want)
	}
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	got, err := auth.ParseTokens([]byte("bob: " + bobToken + "\nalice: " + aliceToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (auth.Token{Name: "alice", Hash: auth.HashToken(aliceToken)}) || got[1].Name != "bob" {
		t.Errorf("ParseTokens = %v", got)
	}
	if got, err := auth.ParseTokens([]byte("{alice: " + aliceToken + "}")); err != nil || len(got) != 1 {
		t.Errorf("flow style: %v, %v", got, err)
	}
	// A token is the text written, whatever YAML 1.1 would make of it.
	for _, tok := range []string{"0x1234567890abcdef", "12345678901234567890123", "1234567890123456e7", "0777777777777777777", "1_000_000_000_000_000_000"} {
		got, err := auth.ParseTokens([]byte("alice: " + tok + "\n"))
		if err != nil || len(got) != 1 || got[0].Hash != auth.HashToken(tok) {
			t.Errorf("the token %s: %v, %v; want it hashed as written", tok, got, err)
		}
	}
	for _, bad := range []string{"alice: short", "- " + aliceToken, "alice: [" + aliceToken + "]", "alice: " + aliceToken + "\nalice: " + bobToken, "alice: {a: " + aliceToken + "}"} {
		if _, err := auth.ParseTokens([]byte(bad)); err == nil {
			t.Errorf("ParseTokens(%q) accepted it", bad)
		}
	}
}

func TestServerTLSRejectsBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.New(t, "ca")
	certFile, keyFile := testpki.WritePEM(t, dir, "server", ca.Issue(t, nil))
	_, otherKey := testpki.WritePEM(t, dir, "other", ca.Issue(t, nil))
	notPEM := filepath.Join(dir, "junk")
	if err := os.WriteFile(notPEM, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string][2]string{
		"missing cert": {filepath.Join(dir, "nope"), keyFile},
		"key mismatch": {certFile, otherKey},
	} {
		if _, err := auth.ServerTLS(files[0], files[1], nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, caFile := range map[string]string{
		"missing CA": filepath.Join(dir, "nope"),
		"CA not PEM": notPEM,
	} {
		cfg := auth.ServerConfig{TLSCert: certFile, TLSKey: keyFile, ClientCA: caFile}
		if _, err := cfg.Verifier(discard, noEnv); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestServerTLSAsksForClientCertificatesTheVerifierAccepts(t *testing.T) {
	t.Parallel()
	ca := testpki.New(t, "ca")
	certFile, keyFile := testpki.WritePEM(t, t.TempDir(), "server", ca.Issue(t, testpki.Server))
	for _, tc := range []struct {
		name string
		v    *auth.Verifier
		want bool
	}{
		{"no verifier", nil, false},
		{"tokens only", mustNew(t, auth.Config{Tokens: []auth.Token{{Name: "a", Hash: auth.HashToken(aliceToken)}}}), false},
		{"client CAs", mustNew(t, auth.Config{ClientCAs: ca.Pool()}), true},
	} {
		cfg, err := auth.ServerTLS(certFile, keyFile, tc.v)
		if err != nil {
			t.Fatal(err)
		}
		// Asked for, never required: the verifier judges it after the handshake.
		if got := cfg.ClientAuth; (got != 0) != tc.want || (tc.want && got.String() != "RequestClientCert") {
			t.Errorf("%s: ClientAuth %v, want a request: %v", tc.name, got, tc.want)
		}
	}
}

func mustNew(t *testing.T, cfg auth.Config) *auth.Verifier {
	t.Helper()
	v, err := auth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLongReasonsAreCut: Verify's reason is cut to a bound at a rune's
// boundary, and still wraps what caused it.
func TestLongReasonsAreCut(t *testing.T) {
	t.Parallel()
	ca := testpki.New(t, "toolwire test CA")
	v := mustNew(t, auth.Config{ClientCAs: ca.Pool()})
	// x509 names the candidate parent whose signature did not verify:
	// here a made-up one named in 8 KiB of é's, as the leaf's issuer is.
	long := strings.Repeat("é", 4096)
	issuer, decoy := testpki.New(t, long), testpki.New(t, long)
	_, err := v.Verify(context.Background(), auth.Credentials{PeerCertificates: []*x509.Certificate{issuer.Issue(t, testpki.Client("agent-7")).Leaf, decoy.Cert}})
	if err == nil {
		t.Fatal("a certificate of another CA was accepted")
	}
	msg := err.Error()
	if len(msg) > 600 || !utf8.ValidString(msg) || !strings.HasSuffix(msg, "…") || !strings.HasPrefix(msg, "client certificate rejected: x509: certificate signed by unknown authority") {
		t.Errorf("reason of %d bytes (valid UTF-8: %v): %.200q…", len(msg), utf8.ValidString(msg), msg)
	}
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("the cut reason %T no longer wraps x509's error", err)
	}
}
