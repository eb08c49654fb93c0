package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	"github.com/toolwire/toolwire/internal/tlsfiles"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

type byteCounter struct{ n atomic.Int64 }

func (c *byteCounter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// TestRefusalReasonsAreBounded: a refusal's reason may quote what the
// client's credentials say, here the 30 KiB name of a made-up issuer in
// its certificate chain (x509 names the candidate parent it tried); each
// RPC of the connection is refused and logged, so the reason is cut to
// a bound rather than costing 30 KiB of log and of status per RPC.
func TestRefusalReasonsAreBounded(t *testing.T) {
	t.Parallel()
	ca := testpki.New(t, "toolwire test CA")
	certFile, keyFile := testpki.WritePEM(t, t.TempDir(), "server", ca.Issue(t, testpki.Server))
	v, err := auth.New(auth.Config{ClientCAs: ca.Pool(), CertificateCallerPrefix: "cert:"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := grpcauth.ServerCredentials(certFile, keyFile, v)
	if err != nil {
		t.Fatal(err)
	}
	var logged byteCounter
	addr := serve(t, v, nil, append([]grpc.ServerOption{grpc.Creds(creds)}, grpcauth.Interceptors(v, slog.New(slog.NewJSONHandler(&logged, nil)))...)...)

	now := time.Now()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	decoyKey, leafKey := key(), key()
	decoy := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: strings.Repeat("D", 30<<10)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	decoyDER, err := x509.CreateCertificate(rand.Reader, decoy, decoy, &decoyKey.PublicKey, decoyKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "mallory"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, decoy, &leafKey.PublicKey, key()) // names decoy, signed by another key
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, addr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(),
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER, decoyDER}, PrivateKey: leafKey}}}))

	const rpcs = 20
	for range rpcs {
		_, err := callWhoami(context.Background(), conn)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "unknown authority") {
			t.Fatalf("err = %v; want UNAUTHENTICATED, unknown authority", err)
		}
		if n := len(status.Convert(err).Message()); n > 1024 {
			t.Errorf("the status message is %d bytes; want it cut to a bound", n)
		}
	}
	// 10 of the 20 refusals are logged (TestRefusalLinesAreLimited).
	if n := logged.n.Load() / 10; n > 2048 {
		t.Errorf("%d bytes logged per refused RPC's line; want the reason cut to a bound", n)
	}
}

// lineCounter counts the lines written to it that hold a text.
type lineCounter struct {
	text string
	n    atomic.Int64
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(strings.Count(string(p), c.text)))
	return len(p), nil
}

// TestRefusalLinesAreLimited: a client refused as fast as it sends gets at
// most 10 lines logged every 10 s, not one per RPC (a line per refusal
// let a client without a token write the server's log as fast as it
// sent); the RPCs are refused all the same.
func TestRefusalLinesAreLimited(t *testing.T) {
	t.Parallel()
	v, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	if err != nil {
		t.Fatal(err)
	}
	logged := &lineCounter{text: "unauthenticated RPC refused"}
	addr := serve(t, v, nil, grpcauth.Interceptors(v, slog.New(slog.NewJSONHandler(logged, nil)))...)
	conn := dial(t, addr, insecure.NewCredentials())
	for i := range 200 {
		if _, err := callWhoami(withAuthorization("Bearer wrong"), conn); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("RPC %d: %v; want UNAUTHENTICATED", i, err)
		}
	}
	if n := logged.n.Load(); n != 10 {
		t.Errorf("%d lines logged for 200 refused RPCs; want 10", n)
	}
}

// TestCertificateCheckedForEachRPC: a client certificate names its caller
// only while it passes the check, on connections already open as on new
// ones (and as on HTTP, where each request is checked): one that expires,
// or whose CA is dropped from the client CA file, is refused on the next
// RPC of the connection it opened when it was good.
func TestCertificateCheckedForEachRPC(t *testing.T) {
	t.Parallel()
	ca, other := testpki.New(t, "toolwire test CA"), testpki.New(t, "the next CA")
	dir := t.TempDir()
	certFile, keyFile := testpki.WritePEM(t, dir, "server", ca.Issue(t, testpki.Server))
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cas, err := tlsfiles.LoadCAs(caFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.New(auth.Config{ClientCAFile: cas, CertificateCallerPrefix: "cert:"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := grpcauth.ServerCredentials(certFile, keyFile, v)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, v, nil, grpc.Creds(creds))
	connect := func(cert tls.Certificate) *grpc.ClientConn {
		return dial(t, addr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}}))
	}
	whoami := func(conn *grpc.ClientConn) error {
		_, err := callWhoami(context.Background(), conn)
		return err
	}

	expiring := connect(ca.Issue(t, testpki.Client("agent-7", func(c *x509.Certificate) { c.NotAfter = time.Now().Add(time.Second) })))
	lasting := connect(ca.Issue(t, testpki.Client("agent-8")))
	for _, conn := range []*grpc.ClientConn{expiring, lasting} {
		if err := whoami(conn); err != nil {
			t.Fatalf("a valid certificate: %v", err)
		}
	}
	time.Sleep(2 * time.Second)
	if err := whoami(expiring); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Errorf("a certificate that expired, on its open connection: %v; want UNAUTHENTICATED, expired", err)
	}
	if err := whoami(lasting); err != nil {
		t.Errorf("a certificate still valid: %v", err)
	}

	// The client CA is rotated out: its certificates stop working on
	// their open connections.
	if err := os.WriteFile(caFile, other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cas.Recheck()
	if err := whoami(lasting); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("a certificate of a CA dropped from the file, on its open connection: %v; want UNAUTHENTICATED, unknown authority", err)
	}
}
