package grpcdial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/follow"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestCredentialsFollowTheirFiles: the credentials a source keeps read its
// CA file and client certificate again when they change, so a connection
// made after a rotation (of the upstream's CA, of the client's
// certificate) works without a restart. A real gRPC server over TLS that
// requires a client certificate changes its own to one of a new CA: until
// the CA file has the new CA the connection is refused; after, the next
// one is made, presenting the rotated client certificate. The server's
// name is still checked, for an IP target (crypto/tls sends no name for
// it) and for a DNS one.
func TestCredentialsFollowTheirFiles(t *testing.T) {
	t.Cleanup(follow.SetRecheck(0))

	serverCA1, serverCA2 := testpki.New(t, "upstream CA 1"), testpki.New(t, "upstream CA 2")
	clientCA1, clientCA2 := testpki.New(t, "client CA 1"), testpki.New(t, "client CA 2")
	upstream := func(c *x509.Certificate) {
		testpki.Server(c) // 127.0.0.1
		c.DNSNames = []string{"localhost"}
	}
	var serving atomic.Pointer[tls.Certificate]
	first := serverCA1.Issue(t, upstream)
	serving.Store(&first)
	clients := x509.NewCertPool()
	clients.AddCert(clientCA1.Cert)
	clients.AddCert(clientCA2.Cert)
	var mu sync.Mutex
	var presented []string
	srvTLS := &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil },
		ClientAuth:     tls.RequireAndVerifyClientCert, ClientCAs: clients,
		VerifyConnection: func(cs tls.ConnectionState) error {
			mu.Lock()
			presented = append(presented, cs.PeerCertificates[0].Subject.CommonName)
			mu.Unlock()
			return nil
		},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	_, port, _ := net.SplitHostPort(lis.Addr().String())

	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	certFile, keyFile := testpki.WritePEM(t, dir, "client", clientCA1.Issue(t, testpki.Client("first")))
	write(t, caFile, serverCA1.PEM)
	s := Settings{Target: lis.Addr().String(), CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
	creds, _, err := s.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	check := func(target string, creds credentials.TransportCredentials) error {
		t.Helper()
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(s.Target, creds); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	// The upstream moves to a certificate of its new CA.
	second := serverCA2.Issue(t, upstream)
	serving.Store(&second)
	if err := check(s.Target, creds); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("the upstream's new CA not yet in ca_file: %v; want the certificate refused", err)
	}
	// The CA file gets the new CA beside the old, and the client a new
	// certificate, of its own new CA.
	write(t, caFile, append(append([]byte(nil), serverCA1.PEM...), serverCA2.PEM...))
	newCert, newKey := testpki.WritePEM(t, t.TempDir(), "client", clientCA2.Issue(t, testpki.Client("second")))
	copyFile(t, newCert, certFile)
	copyFile(t, newKey, keyFile)
	if err := check(s.Target, creds); err != nil {
		t.Fatalf("after the rotation, the same credentials: %v", err)
	}
	mu.Lock()
	if last := presented[len(presented)-1]; last != "second" {
		t.Errorf("the client presented %q after the rotation, want the new certificate, second", last)
	}
	mu.Unlock()

	// The name is checked as crypto/tls checks it: the target's host, an
	// IP address or a DNS name, or server_name.
	for _, tc := range []struct {
		target, serverName string
		ok                 bool
	}{
		{"dns:///localhost:" + port, "", true},
		{"passthrough:///127.0.0.1:" + port, "", true},
		{s.Target, "localhost", true},
		{s.Target, "other.test", false},
		{s.Target, "10.0.0.1", false},
	} {
		c := s
		c.Target, c.ServerName = tc.target, tc.serverName
		creds, _, err := c.Credentials()
		if err != nil {
			t.Fatal(err)
		}
		if err := check(tc.target, creds); (err == nil) != tc.ok {
			t.Errorf("target %s, server_name %q: %v; want ok %v", tc.target, tc.serverName, err, tc.ok)
		}
	}
}

func TestTargetHost(t *testing.T) {
	for target, want := range map[string]string{
		"h:1": "h", "dns:///h:1": "h", "dns://8.8.8.8/h:1": "h", "passthrough:///10.0.0.1:1": "10.0.0.1",
		"[::1]:1": "::1", "dns:///[::1]:443": "::1", "h": "h",
	} {
		if got := targetHost(target); got != want {
			t.Errorf("targetHost(%q) = %q, want %q", target, got, want)
		}
	}
}

// write writes b to file with a modification time later than any it had:
// two writes within a clock tick can otherwise share one.
func write(t *testing.T, file string, b []byte) {
	t.Helper()
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Duration(ticks.Add(1)) * time.Minute)
	if err := os.Chtimes(file, later, later); err != nil {
		t.Fatal(err)
	}
}

var ticks atomic.Int64

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	write(t, to, b)
}
