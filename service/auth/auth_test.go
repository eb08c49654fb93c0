package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service"
	"github.com/toolwire/toolwire/service/auth"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
)

// whoami reports the caller it runs for.
var whoami = tools.Tool{Name: "whoami", Description: "returns the caller", Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
	return tools.Text("caller=" + engine.CallerFrom(ctx)), nil
}}

// serve runs a toolwire server with the diag tools and whoami, authenticated
// by a, on real TCP, until the test ends; it returns the address.
func serve(t *testing.T, a *auth.Authenticator, perms engine.Permissions, opts ...grpc.ServerOption) string {
	t.Helper()
	reg, err := tools.NewRegistry(append(diag.Tools(), whoami)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := service.New(reg, service.Config{EngineConfig: service.EngineConfig{Logger: slog.New(slog.DiscardHandler), Permissions: perms}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, append(opts, a.ServerOptions()...)...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func withAuthorization(v string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", v)
}

// callWhoami runs whoami in a batch and returns its text, or the RPC's error.
func callWhoami(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	stream, err := toolwirev1.NewToolServiceClient(conn).ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "whoami"}}})
	if err != nil {
		return "", err
	}
	var out string
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		if r := ev.GetResult(); r != nil {
			out = r.GetContent()[0].GetText().GetText()
		}
	}
}

func healthy(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check without credentials: %v %v, want SERVING", resp, err)
	}
}

func TestBearerTokens(t *testing.T) {
	t.Parallel()
	a, err := auth.New(auth.Config{Tokens: []auth.Token{
		{Name: "alice", Hash: auth.HashToken(aliceToken)},
		{Name: "bob", Hash: auth.HashToken(bobToken)},
	}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, serve(t, a, nil), insecure.NewCredentials())
	healthy(t, conn)

	for _, tc := range []struct {
		name, authorization string
		second              string // a second authorization header, when set
		want                string
		wantMsg             string // of the UNAUTHENTICATED status, when one is wanted
	}{
		{name: "missing", wantMsg: "missing credentials"},
		{name: "wrong", authorization: "Bearer not-a-token-of-ours-at-all", wantMsg: "invalid bearer token"},
		{name: "not bearer", authorization: "Basic " + aliceToken, wantMsg: "malformed authorization"},
		{name: "empty bearer", authorization: "Bearer ", wantMsg: "malformed authorization"},
		{name: "alice", authorization: "Bearer " + aliceToken, want: "caller=alice"},
		{name: "bob, lower-case scheme", authorization: "bearer " + bobToken, want: "caller=bob"},
		{name: "two headers, both valid", authorization: "Bearer " + aliceToken, second: "Bearer " + bobToken, wantMsg: "2 authorization headers"},
		{name: "two headers, the first valid", authorization: "Bearer " + aliceToken, second: "Bearer wrong", wantMsg: "2 authorization headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.authorization != "" {
				ctx = withAuthorization(tc.authorization)
			}
			if tc.second != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.second)
			}
			got, err := callWhoami(ctx, conn)
			if tc.wantMsg != "" {
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("ExecuteBatch: err = %v, want UNAUTHENTICATED with %q", err, tc.wantMsg)
				}
				_, err := toolwirev1.NewToolServiceClient(conn).ListTools(ctx, &toolwirev1.ListToolsRequest{})
				if status.Code(err) != codes.Unauthenticated {
					t.Errorf("ListTools: err = %v, want UNAUTHENTICATED", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("whoami = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestNoAuthenticationMeansTheAnonymousCaller(t *testing.T) {
	t.Parallel()
	a, err := auth.New(auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := callWhoami(context.Background(), dial(t, serve(t, a, nil), insecure.NewCredentials()))
	if err != nil || got != "caller=" {
		t.Errorf("whoami = %q, %v; want the anonymous caller", got, err)
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
	for _, bad := range []string{"alice: short", "- " + aliceToken, "alice: [" + aliceToken + "]", "alice: " + aliceToken + "\nalice: " + bobToken} {
		if _, err := auth.ParseTokens([]byte(bad)); err == nil {
			t.Errorf("ParseTokens(%q) accepted it", bad)
		}
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	p := auth.Policy{
		"reader": {Allow: []string{"fs.read*", "echo"}},
		"admin":  {Deny: []string{"fs.delete"}},
		"mixed":  {Allow: []string{"fs.*"}, Deny: []string{"fs.write"}},
		"*":      {Allow: []string{"echo"}},
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caller, tool string
		want         bool
	}{
		{"reader", "fs.read_file", true},
		{"reader", "echo", true},
		{"reader", "fs.write", false},
		{"admin", "fs.write", true},
		{"admin", "fs.delete", false},
		{"mixed", "fs.read", true},
		{"mixed", "fs.write", false}, // deny wins over allow
		{"stranger", "echo", true},   // "*" applies
		{"stranger", "fs.read", false},
		{"", "fs.read", false}, // the anonymous caller too
	} {
		if got := p.Permitted(tc.caller, tc.tool); got != tc.want {
			t.Errorf("Permitted(%q, %q) = %v, want %v", tc.caller, tc.tool, got, tc.want)
		}
	}
	if !(auth.Policy{"x": {Deny: []string{"*"}}}).Permitted("y", "anything") {
		t.Error("a caller without rules and no \"*\" entry is refused; want everything permitted")
	}
	if err := (auth.Policy{"x": {Allow: []string{"fs.[a"}}}).Validate(); err == nil {
		t.Error("Validate accepted a malformed pattern")
	}
}

func TestPermissionsByTokenName(t *testing.T) {
	t.Parallel()
	a, err := auth.New(auth.Config{Tokens: []auth.Token{
		{Name: "alice", Hash: auth.HashToken(aliceToken)},
		{Name: "bob", Hash: auth.HashToken(bobToken)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, serve(t, a, auth.Policy{"alice": {Allow: []string{"echo"}}}), insecure.NewCredentials())
	c := toolwirev1.NewToolServiceClient(conn)
	list := func(token string) []string {
		resp, err := c.ListTools(withAuthorization("Bearer "+token), &toolwirev1.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, t := range resp.GetTools() {
			names = append(names, t.GetName())
		}
		return names
	}
	if got := list(aliceToken); strings.Join(got, ",") != "echo" {
		t.Errorf("alice's tools = %v, want [echo]", got)
	}
	if got := list(bobToken); len(got) != 4 {
		t.Errorf("bob's tools = %v, want all four", got)
	}
	if got, err := callWhoami(withAuthorization("Bearer "+aliceToken), conn); err != nil || !strings.HasPrefix(got, "not permitted") {
		t.Errorf("alice calling whoami: %q, %v; want a not-permitted result", got, err)
	}
	if got, err := callWhoami(withAuthorization("Bearer "+bobToken), conn); err != nil || got != "caller=bob" {
		t.Errorf("bob calling whoami: %q, %v", got, err)
	}
}

// pki is a throwaway certificate authority.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &pki{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate signed by the CA; edit adjusts its template.
func (p *pki) issue(t *testing.T, edit func(*x509.Certificate)) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func clientCert(cn string, edit ...func(*x509.Certificate)) func(*x509.Certificate) {
	return func(c *x509.Certificate) {
		c.Subject.CommonName = cn
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		for _, e := range edit {
			e(c)
		}
	}
}

// writePEM writes a certificate and its key to files in dir.
func writePEM(t *testing.T, dir, name string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca, other := newPKI(t, "toolwire test CA"), newPKI(t, "some other CA")
	dir := t.TempDir()
	certFile, keyFile := writePEM(t, dir, "server", ca.issue(t, func(c *x509.Certificate) {
		c.Subject.CommonName = "toolwire"
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}))
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := auth.ServerCredentials(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{ClientCertificates: true, Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, a, nil, grpc.Creds(creds))
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	connect := func(certs ...tls.Certificate) *grpc.ClientConn {
		return dial(t, addr, credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs}))
	}

	for _, tc := range []struct {
		name    string
		certs   []tls.Certificate
		ctx     context.Context
		want    string // whoami's answer, or
		wantMsg string // the UNAUTHENTICATED status's message
	}{
		{name: "valid", certs: []tls.Certificate{ca.issue(t, clientCert("agent-7"))}, want: "caller=agent-7"},
		{name: "SPIFFE ID", certs: []tls.Certificate{ca.issue(t, clientCert("", func(c *x509.Certificate) {
			c.URIs = []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/agent"}}
		}))}, want: "caller=spiffe://example.org/agent"},
		{name: "expired", certs: []tls.Certificate{ca.issue(t, clientCert("agent-7", func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		}))}, wantMsg: "expired"},
		{name: "wrong CA", certs: []tls.Certificate{other.issue(t, clientCert("agent-7"))}, wantMsg: "unknown authority"},
		{name: "server certificate", certs: []tls.Certificate{ca.issue(t, func(c *x509.Certificate) {
			c.Subject.CommonName = "agent-7"
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		})}, wantMsg: "client certificate rejected"},
		{name: "none", wantMsg: "missing credentials"},
		{name: "token, no certificate", ctx: withAuthorization("Bearer " + aliceToken), want: "caller=alice"},
		{name: "wrong token beats a valid certificate", certs: []tls.Certificate{ca.issue(t, clientCert("agent-7"))},
			ctx: withAuthorization("Bearer not-a-token-of-ours-at-all"), wantMsg: "invalid bearer token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := connect(tc.certs...)
			healthy(t, conn)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got, err := callWhoami(ctx, conn)
			if tc.wantMsg != "" {
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("err = %v, want UNAUTHENTICATED with %q", err, tc.wantMsg)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("whoami = %q, %v; want %q", got, err, tc.want)
			}
		})
	}

	// A plaintext client gets no further than the handshake.
	plain := dial(t, addr, insecure.NewCredentials())
	if _, err := healthpb.NewHealthClient(plain).Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("a plaintext client reached a TLS server")
	}
}

func TestServerCredentialsRejectsBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newPKI(t, "ca")
	certFile, keyFile := writePEM(t, dir, "server", ca.issue(t, func(*x509.Certificate) {}))
	notPEM := filepath.Join(dir, "junk")
	if err := os.WriteFile(notPEM, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string][3]string{
		"missing cert": {filepath.Join(dir, "nope"), keyFile, ""},
		"key mismatch": {certFile, writeOtherKey(t, dir, ca), ""},
		"missing CA":   {certFile, keyFile, filepath.Join(dir, "nope")},
		"CA not PEM":   {certFile, keyFile, notPEM},
	} {
		if _, err := auth.ServerCredentials(files[0], files[1], files[2]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func writeOtherKey(t *testing.T, dir string, ca *pki) string {
	_, key := writePEM(t, dir, "other", ca.issue(t, func(*x509.Certificate) {}))
	return key
}

func TestServerCertificateIsReadAgainWhenItsFilesChange(t *testing.T) {
	t.Parallel()
	ca := newPKI(t, "ca")
	dir := t.TempDir()
	certFile, keyFile := writePEM(t, dir, "server", ca.issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "first" }))
	get, recheckNow := auth.CertificateGetter(certFile, keyFile)
	commonName := func() string {
		t.Helper()
		c, err := get()
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if got := commonName(); got != "first" {
		t.Fatalf("certificate %q, want first", got)
	}
	touch := func() {
		later := time.Now().Add(time.Hour)
		for _, f := range []string{certFile, keyFile} {
			if err := os.Chtimes(f, later, later); err != nil {
				t.Fatal(err)
			}
		}
		recheckNow()
	}

	// A half-written pair (the new certificate, the old key) keeps the last
	// good one in service.
	second := ca.issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "second" })
	secondCert, secondKey := writePEM(t, t.TempDir(), "server", second)
	copyFile(t, secondCert, certFile)
	touch()
	if got := commonName(); got != "first" {
		t.Errorf("with a mismatched pair: certificate %q, want the last good one", got)
	}
	copyFile(t, secondKey, keyFile)
	touch()
	if got := commonName(); got != "second" {
		t.Errorf("after rotation: certificate %q, want second", got)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
