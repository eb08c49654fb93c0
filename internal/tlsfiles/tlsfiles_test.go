package tlsfiles_test

import (
	"crypto/x509"
	"os"
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
