package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

const testToken = "client-test-token-0123456789"

// serveWithToken serves the diag tools on TCP, accepting testToken only,
// over TLS when cert is given; it returns the address.
func serveWithToken(t *testing.T, cert *tls.Certificate) string {
	t.Helper()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "agent", Hash: auth.HashToken(testToken)}}})
	if err != nil {
		t.Fatal(err)
	}
	opts := grpcauth.Interceptors(v, slog.New(slog.DiscardHandler))
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}})))
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close) // after Serve has returned: cleanups run last first
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, opts...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolwire"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func listErr(t *testing.T, target string, opts ...client.Option) error {
	t.Helper()
	c, err := client.New(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ListTools(testContext(t))
	return err
}

func TestWithTokenOverTLS(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	addr := serveWithToken(t, &cert)
	tlsCreds := client.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool}))
	if err := listErr(t, addr, tlsCreds, client.WithToken(testToken)); err != nil {
		t.Errorf("with the token: %v", err)
	}
	if err := listErr(t, addr, tlsCreds, client.WithToken("wrong-token-0123456789")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("with a wrong token: %v, want UNAUTHENTICATED", err)
	}
	if err := listErr(t, addr, tlsCreds); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without a token: %v, want UNAUTHENTICATED", err)
	}
}

func TestWithTokenRefusesPlaintextUnlessInsecure(t *testing.T) {
	t.Parallel()
	addr := serveWithToken(t, nil)
	if c, err := client.New(addr, client.WithToken(testToken)); err == nil || !strings.Contains(err.Error(), "transport level security") {
		if c != nil {
			c.Close()
		}
		t.Errorf("WithToken over plaintext: %v, want a refusal to send it", err)
	}
	if err := listErr(t, addr, client.WithInsecureToken(testToken)); err != nil {
		t.Errorf("WithInsecureToken over plaintext: %v", err)
	}
}
