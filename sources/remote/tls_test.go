package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA writes a CA certificate to dir and returns it with a server
// certificate it signed for name.
func testCA(t *testing.T, dir, name string) (caFile string, server tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestTLS(t *testing.T) {
	caFile, cert := testCA(t, t.TempDir(), "toolwire-b.test")
	b := &remoteB{}
	regB, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	srvB := loopback.Serve(t, regB, grpcserve.Config{},
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})),
		grpc.StreamInterceptor(b.recordAuth))

	t.Setenv("REMOTE_TLS_TOKEN", "tok-tls")
	mounts, reg := newMounts(t)
	logs := &logbuf.Buffer{}
	mounts.log = slog.New(slog.NewTextHandler(logs, nil))
	err = mounts.Sync(context.Background(), []Config{
		{Name: "b", Target: srvB.Addr, CAFile: caFile, ServerName: "toolwire-b.test", Token: "{{REMOTE_TLS_TOKEN}}"},
		{Name: "wrong", Target: srvB.Addr, CAFile: caFile, ServerName: "other.test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "B's tools over TLS", sourcetest.Has("b_echo"))
	b.mu.Lock()
	if len(b.auth) == 0 || b.auth[0] != "Bearer tok-tls" {
		t.Errorf("B saw authorization %q", b.auth)
	}
	b.mu.Unlock()

	// A certificate for another name is refused, and said so in the log.
	for limit := time.Now().Add(waitLimit); !strings.Contains(logs.String(), `remote=wrong`) ||
		!strings.Contains(logs.String(), "certificate"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("no certificate error logged for the mount with the wrong server name:\n%s", logs)
		}
	}
	for _, n := range reg.Snapshot().Names() {
		if strings.HasPrefix(n, "wrong_") {
			t.Errorf("tool %s mounted despite the wrong server name", n)
		}
	}
	if strings.Contains(logs.String(), "tok-tls") {
		t.Errorf("the token is in the log:\n%s", logs)
	}
}
