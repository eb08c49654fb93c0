package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/h2raw"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/service/grpcserve"
)

const (
	aliceToken = "alice-0123456789abcdef0123456789"
	bobToken   = "bob-0123456789abcdef0123456789"
)

func TestSecurityConfigFromFileAndFlags(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "toolwire.yaml", `
tls_cert: /etc/tls/tls.crt
tls_key: /etc/tls/tls.key
auth:
  tokens_file: /etc/toolwire/tokens
  tokens:
    - name: ci
      hash: `+auth.HashToken(aliceToken)+`
  permissions:
    ci:
      allow: ["echo", "fs.*"]
      deny: ["fs.write"]
    "*":
      deny: ["*"]
max_concurrent_calls: 100
max_queue_wait: 2s
max_calls_per_caller: 10
max_message_bytes: 1048576
max_connection_age: 10m
max_connection_age_grace: 1m
keepalive_min_time: 20s
keepalive_time: 2m
keepalive_timeout: 10s
`)
	cfg, _, err := parseServeArgs([]string{"--config", path, "--max-concurrent-calls", "50", "--client-ca", "/etc/tls/ca.crt", "--tokens-file", "/run/tokens"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := SecurityConfig{
		TLSCert: "/etc/tls/tls.crt", TLSKey: "/etc/tls/tls.key", ClientCA: "/etc/tls/ca.crt",
		Auth: auth.CallerConfig{
			TokensFile: "/run/tokens",
			Tokens:     []auth.Token{{Name: "ci", Hash: auth.HashToken(aliceToken)}},
			Permissions: policy.Permissions{
				"ci": {Allow: []string{"echo", "fs.*"}, Deny: []string{"fs.write"}},
				"*":  {Deny: []string{"*"}},
			},
		},
	}
	if diff := cmp.Diff(want, cfg.SecurityConfig); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	ec, sc := cfg.EngineConfig, cfg.ServiceConfig
	type limits struct {
		MaxConcurrentCalls, MaxCallsPerCaller, MaxMessageBytes int
		MaxQueueWait                                           time.Duration
		grpcserve.Limits
	}
	wantLimits := limits{50, 10, 1 << 20, 2 * time.Second, grpcserve.Limits{
		MaxConnectionAge: 10 * time.Minute, MaxConnectionAgeGrace: time.Minute,
		KeepaliveMinTime: 20 * time.Second, KeepaliveTime: 2 * time.Minute, KeepaliveTimeout: 10 * time.Second,
	}}
	gotLimits := limits{ec.MaxConcurrentCalls, ec.MaxCallsPerCaller, ec.MaxMessageBytes, ec.MaxQueueWait, sc.Limits}
	if diff := cmp.Diff(wantLimits, gotLimits); diff != "" {
		t.Errorf("limits in engine.Config and grpcserve.Config (-want +got):\n%s", diff)
	}
	rules, err := cfg.admission(nil)
	if err != nil {
		t.Fatal(err)
	}
	if ci, other := (&engine.Identity{ID: "ci"}), (&engine.Identity{ID: "other"}); !rules.Permitted(ci, "fs.read") || rules.Permitted(ci, "fs.write") || rules.Permitted(other, "echo") {
		t.Errorf("permissions did not reach the engine's admission: %v", cfg.SecurityConfig.Permissions())
	}
}

func TestSecurityConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := writeFile(t, "short", "alice: short\n")
	tests := []struct {
		name string
		cfg  SecurityConfig
		env  string
		want string
	}{
		{"cert without key", SecurityConfig{TLSCert: "c.pem"}, "", "go together"},
		{"client CA without TLS", SecurityConfig{ClientCA: "ca.pem"}, "", "needs --tls-cert"},
		{"missing certificate", SecurityConfig{TLSCert: filepath.Join(dir, "no.crt"), TLSKey: filepath.Join(dir, "no.key")}, "", "no.crt"},
		{"missing tokens file", SecurityConfig{Auth: auth.CallerConfig{TokensFile: filepath.Join(dir, "none")}}, "", "none"},
		{"short token in file", SecurityConfig{Auth: auth.CallerConfig{TokensFile: short}}, "", "shorter than"},
		{"short token in env", SecurityConfig{}, "bob: x", auth.TokensEnv},
		{"bad hash", SecurityConfig{Auth: auth.CallerConfig{Tokens: []auth.Token{{Name: "a", Hash: "md5:00"}}}}, "", "auth.tokens"},
		{"same token twice", SecurityConfig{Auth: auth.CallerConfig{Tokens: []auth.Token{{Name: "a", Hash: auth.HashToken(aliceToken)}}}}, "b: " + aliceToken, "same token"},
		{"bad pattern", SecurityConfig{Auth: auth.CallerConfig{Permissions: policy.Permissions{"a": {Allow: []string{"["}}}}}, "", "auth.permissions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := serveSecurity(tt.cfg, slog.New(slog.DiscardHandler), func(string) string { return tt.env })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v; want one containing %q", err, tt.want)
			}
		})
	}
}

func TestServeWithTokensAndPermissions(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: "+aliceToken+"\nbob: "+bobToken+"\n")
	config := writeFile(t, "toolwire.yaml", "auth:\n  permissions:\n    alice:\n      allow: [echo]\n")
	s := startServe(t, "--diag", "--tokens-file", tokens, "--config", config)
	if !strings.Contains(s.stderr.String(), "plaintext") {
		t.Errorf("no warning about tokens over plaintext in the log:\n%s", s.stderr)
	}

	got := runCmd(t, s.addr, "tools", "--token", aliceToken)
	if got.err != nil || !strings.Contains(got.stdout, "echo") || strings.Contains(got.stdout, "sleep") {
		t.Errorf("alice's tools: %v\n%s", got.err, got.stdout)
	}
	got = runCmd(t, s.addr, "call", "--token", aliceToken, "sleep", `{"ms":1}`)
	if got.code != 1 || !strings.Contains(got.stdout, "not permitted") {
		t.Errorf("alice calling sleep: exit %d, stdout %q; want a not-permitted result", got.code, got.stdout)
	}
	got = runCmd(t, s.addr, "call", "--token", bobToken, "sleep", `{"ms":1}`)
	if got.err != nil {
		t.Errorf("bob calling sleep: %v\n%s%s", got.err, got.stdout, got.stderr)
	}
	got = runCmd(t, s.addr, "tools", "--token-env", "")
	if got.code != 1 || !strings.Contains(got.err.Error(), "Unauthenticated") {
		t.Errorf("no token: exit %d, %v; want Unauthenticated", got.code, got.err)
	}
	// Refused before its request is read: one announced and never sent.
	if code, msg := h2raw.Unsent(t, s.addr, "/toolwire.v1.ToolService/CallTool", ""); code != "16" {
		t.Errorf("a CallTool without a token whose request never comes: grpc-status %q (%s); want 16 at once", code, msg)
	}
}

// TestServeRevokesARemovedToken: a token removed from the tokens file (a
// Kubernetes Secret updated in place) is refused by the running server
// within the file's 10 s look (one Verifier checks every surface), and one added
// is accepted, without a restart.
func TestServeRevokesARemovedToken(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: "+aliceToken+"\nbob: "+bobToken+"\n")
	s := startServe(t, "--diag", "--tokens-file", tokens)
	call := func(token string) result {
		return runCmd(t, s.addr, "call", "--token", token, "echo", `{"text":"hi"}`)
	}
	if got := call(aliceToken); got.err != nil {
		t.Fatalf("alice before the change: %v", got.err)
	}
	const carolToken = "carol-token-0123456789abcdef"
	if err := os.WriteFile(tokens, []byte("bob: "+bobToken+"\ncarol: "+carolToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(tokens, later, later); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := call(aliceToken)
		if got.err != nil && strings.Contains(got.err.Error(), "Unauthenticated") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's removed token still accepted 30 s after the change: %v", got.err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, token := range []string{bobToken, carolToken} {
		if got := call(token); got.err != nil {
			t.Errorf("a token the file holds after the change: %v", got.err)
		}
	}
}

func TestClientRefusesPlaintextTokenToAnotherHost(t *testing.T) {
	t.Parallel()
	c := clientSecurity{token: aliceToken}
	if _, err := c.options("10.1.2.3:50051"); err == nil || !strings.Contains(err.Error(), "plaintext") {
		t.Errorf("token in plaintext to another host: %v, want a refusal", err)
	}
	for _, addr := range []string{"127.0.0.1:50051", "localhost:50051", "[::1]:50051"} {
		if _, err := c.options(addr); err != nil {
			t.Errorf("token in plaintext to %s: %v", addr, err)
		}
	}
	c.useTLS = true
	if _, err := c.options("10.1.2.3:50051"); err != nil {
		t.Errorf("token over TLS: %v", err)
	}
}

func TestServeMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caKey, caCert, caFile := newCA(t, dir)
	srvCert, srvKey := issue(t, dir, "server", caKey, caCert, serverAuth)
	cliCert, cliKey := issue(t, dir, "agent-1", caKey, caCert, clientAuth)
	s := startServe(t, "--diag", "--tls-cert", srvCert, "--tls-key", srvKey, "--client-ca", caFile)

	got := runCmd(t, s.addr, "call", "--ca", caFile, "--cert", cliCert, "--key", cliKey, "echo", `{"text":"over mTLS"}`)
	if got.err != nil || !strings.Contains(got.stdout, "over mTLS") {
		t.Errorf("call with a client certificate: %v\n%s%s", got.err, got.stdout, got.stderr)
	}
	got = runCmd(t, s.addr, "tools", "--ca", caFile, "--token-env", "")
	if got.err == nil || !strings.Contains(got.err.Error(), "Unauthenticated") {
		t.Errorf("tools without a client certificate: %v, want Unauthenticated", got.err)
	}
	got = runCmd(t, s.addr, "tools", "--token-env", "")
	if got.err == nil {
		t.Error("a plaintext client reached the TLS server")
	}
}

// TestServeClientCARotation: the client CA file is read again when it
// changes, so a running server accepts a client certificate of a new CA
// once its bundle holds it, without a restart (the file is looked at every
// 10 s at most), and still the old CA's.
func TestServeClientCARotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caKey, caCert, caFile := newCA(t, dir)
	srvCert, srvKey := issue(t, dir, "server", caKey, caCert, serverAuth)
	oldCert, oldKey := issue(t, dir, "agent-old", caKey, caCert, clientAuth)
	dir2 := t.TempDir()
	ca2Key, ca2Cert, ca2File := newCA(t, dir2)
	newCert, newKey := issue(t, dir2, "agent-new", ca2Key, ca2Cert, clientAuth)
	bundle := filepath.Join(t.TempDir(), "client-ca.crt")
	copyTo := func(files ...string) {
		t.Helper()
		var b []byte
		for _, f := range files {
			more, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, more...)
		}
		if err := os.WriteFile(bundle, b, 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Minute)
		if err := os.Chtimes(bundle, later, later); err != nil {
			t.Fatal(err)
		}
	}
	copyTo(caFile)
	s := startServe(t, "--diag", "--tls-cert", srvCert, "--tls-key", srvKey, "--client-ca", bundle)
	call := func(cert, key string) result {
		return runCmd(t, s.addr, "call", "--ca", caFile, "--cert", cert, "--key", key, "--token-env", "", "echo", `{"text":"rotated"}`)
	}
	if got := call(newCert, newKey); got.err == nil || !strings.Contains(got.err.Error(), "Unauthenticated") {
		t.Fatalf("a certificate of a CA not in the bundle: %v, want Unauthenticated", got.err)
	}
	copyTo(caFile, ca2File)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := call(newCert, newKey)
		if got.err == nil && strings.Contains(got.stdout, "rotated") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a certificate of the CA added to the bundle: %v, still refused 30 s later\n%s", got.err, got.stderr)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got := call(oldCert, oldKey); got.err != nil {
		t.Errorf("a certificate of the CA kept in the bundle: %v", got.err)
	}
}

// serverAuth and clientAuth make issue's certificate a server's for
// 127.0.0.1, or a client's.
func serverAuth(c *x509.Certificate) {
	c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
}

func clientAuth(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }

func newCA(t *testing.T, dir string) (*ecdsa.PrivateKey, *x509.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	path := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return key, cert, path
}

// issue writes a certificate for cn signed by the CA, and its key.
func issue(t *testing.T, dir, cn string, caKey *ecdsa.PrivateKey, ca *x509.Certificate, edit func(*x509.Certificate)) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestServeWarnsOfUnnamedApprovers: approvers and approval rules' callers
// that no credential names are warned of at start, as auth.permissions'
// are: "approvers: [alcie]" let no one approve, without a word.
func TestServeWarnsOfUnnamedApprovers(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: "+strings.Repeat("a", 32)+"\n")
	path := writeFile(t, "toolwire.yaml", "auth:\n  tokens_file: "+tokens+"\napprovers: [alice, alcie]\napprovals:\n  - tools: [echo]\n    callers: [alice, bob]\n")
	s := startServe(t, "--config", path, "--diag")
	for _, want := range []string{
		`"msg":"approvers names a caller that no credential names`, `"caller":"alcie"`,
		`"msg":"approvals[0].callers names a caller that no credential names`, `"caller":"bob"`,
	} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, s.stderr)
		}
	}
	if strings.Contains(s.stderr.String(), `"caller":"alice"`) {
		t.Errorf("alice, whom a token names, is warned of:\n%s", s.stderr)
	}
}

// TestServeWarnsOfPatternsMatchingNoTool: a permission or approval
// pattern that matches no tool registered at start, and could match no
// tool of a server that connects later, is warned of: a misspelt deny
// pattern let the tool through without a word.
func TestServeWarnsOfPatternsMatchingNoTool(t *testing.T) {
	t.Parallel()
	tokens := writeFile(t, "tokens", "alice: "+strings.Repeat("a", 32)+"\n")
	path := writeFile(t, "toolwire.yaml", "auth:\n  tokens_file: "+tokens+"\n  permissions:\n    alice:\n"+
		"      allow: [ech*, eho, files_*, fil*]\n      deny: [sleeep]\napprovals:\n  - tools: [fail, fial]\n"+
		"mcp_servers:\n  - name: files\n    command: /nonexistent/mcp-server\n")
	s := startServe(t, "--config", path, "--diag")
	for _, want := range []string{
		`"msg":"auth.permissions.alice.allow pattern matches no tool","pattern":"eho"`,
		`"msg":"auth.permissions.alice.deny pattern matches no tool","pattern":"sleeep"`,
		`"msg":"approvals[0].tools pattern matches no tool","pattern":"fial"`,
	} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, s.stderr)
		}
	}
	for _, matched := range []string{`"pattern":"ech*"`, `"pattern":"files_*"`, `"pattern":"fil*"`, `"pattern":"fail"`} {
		if strings.Contains(s.stderr.String(), matched) {
			t.Errorf("a pattern that matches, or may match the MCP server's tools, is warned of (%s):\n%s", matched, s.stderr)
		}
	}
}
