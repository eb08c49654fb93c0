package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	"github.com/toolwire/toolwire/internal/tlsfiles"
)

// issue makes a certificate of tmpl signed by parent's key (self-signed
// when parent is nil) with a new P-256 key.
func issue(t *testing.T, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func caTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
}

func leafTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

// TestClientCertificateChainIsBounded: x509 tries every presented
// certificate whose subject fits as a parent, a signature check apiece (up
// to 100: half a second of P-521 for a chain of made-up P-521
// "intermediates"), so a client's chain may hold at most
// MaxClientIntermediates intermediates; one past that is refused without
// any check, while a real chain through intermediates is accepted.
func TestClientCertificateChainIsBounded(t *testing.T) {
	t.Parallel()
	root, rootKey := issue(t, caTemplate("root"), nil, nil)
	roots := x509.NewCertPool()
	roots.AddCert(root)
	v := mustNew(t, auth.Config{ClientCAs: roots, CertificateCallerPrefix: "cert:"})
	checks := auth.CountCertificateChecks(v)

	// root → inter-1 → … → inter-n → leaf: accepted up to the bound.
	parent, parentKey := root, rootKey
	var inters []*x509.Certificate
	for i := range auth.MaxClientIntermediates {
		parent, parentKey = issue(t, caTemplate("inter-"+string(rune('1'+i))), parent, parentKey)
		inters = append([]*x509.Certificate{parent}, inters...)
	}
	leaf, _ := issue(t, leafTemplate("agent-7"), parent, parentKey)
	if c := v.CheckCertificate(append([]*x509.Certificate{leaf}, inters...)); c.Err != nil || c.Identity != "cert:agent-7" {
		t.Errorf("a chain through %d intermediates: %+v; want cert:agent-7", len(inters), c)
	}

	// A leaf naming the issuer "decoy", and more certificates of that
	// subject than the bound, none its parent.
	decoyParent, decoyKey := issue(t, caTemplate("decoy"), nil, nil)
	mallory, _ := issue(t, leafTemplate("mallory"), decoyParent, decoyKey)
	chain := []*x509.Certificate{mallory}
	for range auth.MaxClientIntermediates + 1 {
		d, _ := issue(t, caTemplate("decoy"), nil, nil)
		chain = append(chain, d)
	}
	before := checks.Load()
	c := v.CheckCertificate(chain)
	if c.Err == nil || !strings.Contains(c.Err.Error(), "intermediate certificates; at most") {
		t.Errorf("a chain of %d made-up intermediates: %+v; want it refused for its length", len(chain)-1, c)
	}
	if n := checks.Load() - before; n != 0 {
		t.Errorf("the over-long chain was checked against the CAs %d times; want none", n)
	}
}

// TestClientCertificateCheckedOncePerChain: on the HTTP port a client
// certificate is checked by the request, and every request of a
// connection presents the same chain; it is checked against the client CAs
// once, not once per request, whether it is accepted or refused, and again
// once the client CAs change.
func TestClientCertificateCheckedOncePerChain(t *testing.T) {
	t.Parallel()
	ca, other := testpki.New(t, "client-ca"), testpki.New(t, "other-ca")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cas, err := tlsfiles.LoadCAs(caFile)
	if err != nil {
		t.Fatal(err)
	}
	v := mustNew(t, auth.Config{ClientCAFile: cas, CertificateCallerPrefix: "cert:"})
	checks := auth.CountCertificateChecks(v)
	srv := httptest.NewUnstartedServer(auth.RequireCredentials(v, discard)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	get := func(c *http.Client) int {
		t.Helper()
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	client := func(cert tls.Certificate) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
		return &http.Client{Transport: tr}
	}
	const requests = 20
	for _, c := range []struct {
		name string
		cert tls.Certificate
		want int
	}{
		{"accepted", ca.Issue(t, testpki.Client("agent-7")), http.StatusOK},
		{"refused", other.Issue(t, testpki.Client("mallory")), http.StatusUnauthorized},
	} {
		before := checks.Load()
		hc := client(c.cert)
		for range requests {
			if got := get(hc); got != c.want {
				t.Fatalf("%s: %d; want %d", c.name, got, c.want)
			}
		}
		if n := checks.Load() - before; n != 1 {
			t.Errorf("%s: %d requests checked the chain %d times; want once", c.name, requests, n)
		}
	}

	// The CAs change (the client CA rotated out): the chain accepted
	// before is checked again, and refused.
	agent := client(ca.Issue(t, testpki.Client("agent-8")))
	if got := get(agent); got != http.StatusOK {
		t.Fatalf("before the rotation: %d", got)
	}
	if err := os.WriteFile(caFile, other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cas.Recheck()
	if got := get(agent); got != http.StatusUnauthorized {
		t.Errorf("after its CA was removed: %d; want 401", got)
	}
}
