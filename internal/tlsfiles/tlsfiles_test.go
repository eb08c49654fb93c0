package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testpki"
	"github.com/toolwire/toolwire/internal/tlsfiles"
)

func TestReadAgainWhenTheFilesChange(t *testing.T) {
	t.Parallel()
	ca := testpki.New(t, "ca")
	dir := t.TempDir()
	certFile, keyFile := testpki.WritePEM(t, dir, "server", ca.Issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "first" }))
	k, err := tlsfiles.Load(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	get, recheckNow := k.Certificate, k.Recheck
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
	second := ca.Issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "second" })
	secondCert, secondKey := testpki.WritePEM(t, t.TempDir(), "server", second)
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

// TestCAsFollowTheirFile: a CA bundle is read again when its file changes
// (the new CA trusted, the old one no longer unless the bundle keeps it),
// and while the file is missing or holds no certificate the last good
// bundle stays.
func TestCAsFollowTheirFile(t *testing.T) {
	t.Parallel()
	ca1, ca2 := testpki.New(t, "first CA"), testpki.New(t, "second CA")
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, ca1.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cas, err := tlsfiles.LoadCAs(file)
	if err != nil {
		t.Fatal(err)
	}
	leaf1, leaf2 := leaf(t, ca1.Issue(t, testpki.Server)), leaf(t, ca2.Issue(t, testpki.Server))
	trusts := func(l *x509.Certificate) bool {
		_, err := l.Verify(x509.VerifyOptions{Roots: cas.Pool()})
		return err == nil
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Hour)
		os.Chtimes(file, later, later)
		cas.Recheck()
	}
	if !trusts(leaf1) || trusts(leaf2) {
		t.Fatal("the first bundle: want the first CA trusted, the second not")
	}
	write([]byte("half written"))
	if !trusts(leaf1) {
		t.Error("a file with no certificate: want the last good bundle kept")
	}
	write(append(append([]byte(nil), ca1.PEM...), ca2.PEM...))
	if !trusts(leaf1) || !trusts(leaf2) {
		t.Error("a bundle of both: want both trusted")
	}
	write(ca2.PEM)
	if trusts(leaf1) || !trusts(leaf2) {
		t.Error("the second CA alone: want the first no longer trusted")
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	cas.Recheck()
	if !trusts(leaf2) {
		t.Error("the file removed: want the last good bundle kept")
	}
	if _, err := tlsfiles.LoadCAs(file); err == nil {
		t.Error("LoadCAs of a missing file: want an error")
	}
}

// TestVerifyServer checks a server's chain and name as crypto/tls does:
// the name the connection was made for, or, where it has none (crypto/tls
// sends no server name for an IP address), the name given.
func TestVerifyServer(t *testing.T) {
	t.Parallel()
	ca, other := testpki.New(t, "CA"), testpki.New(t, "other CA")
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cas, err := tlsfiles.LoadCAs(file)
	if err != nil {
		t.Fatal(err)
	}
	server := leaf(t, ca.Issue(t, testpki.Server)) // 127.0.0.1
	for _, tc := range []struct {
		what string
		sni  string // the connection's ServerName: "" for an IP address
		name string
		cert *x509.Certificate
		ok   bool
	}{
		{"its IP", "", "127.0.0.1", server, true},
		{"another IP", "", "10.0.0.1", server, false},
		{"a host name it does not hold", "", "redis.example", server, false},
		{"the connection's name, not the one given", "redis.example", "127.0.0.1", server, false},
		{"another CA's certificate", "", "127.0.0.1", leaf(t, other.Issue(t, testpki.Server)), false},
		{"no name at all", "", "", server, false},
	} {
		err := cas.VerifyServer(tc.name)(tls.ConnectionState{ServerName: tc.sni, PeerCertificates: []*x509.Certificate{tc.cert}})
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v; want ok %v", tc.what, err, tc.ok)
		}
		var ve *tls.CertificateVerificationError
		if err != nil && tc.name != "" && !errors.As(err, &ve) {
			t.Errorf("%s: %T; want a *tls.CertificateVerificationError, as crypto/tls returns", tc.what, err)
		}
	}
	if err := cas.VerifyServer("127.0.0.1")(tls.ConnectionState{}); err == nil {
		t.Error("no certificate: want an error")
	}
}

func leaf(t *testing.T, c tls.Certificate) *x509.Certificate {
	t.Helper()
	l, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return l
}
