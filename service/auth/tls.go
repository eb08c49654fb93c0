package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// ServerCredentials returns TLS transport credentials for a server whose
// certificate and key are in the PEM files certFile and keyFile. The files
// are read again when they change, so a rotated certificate takes effect for
// new connections without a restart.
//
// With clientCAFile (PEM, one or more certificates) set, clients are asked
// for a certificate, and one that chains to those CAs names the caller (see
// ClientCertInfo). A connection without a certificate is still accepted, so
// that health probes get through; the Authenticator refuses its other RPCs
// with UNAUTHENTICATED, and a certificate that fails verification (expired,
// from another CA) is refused the same way, with the reason.
func ServerCredentials(certFile, keyFile, clientCAFile string) (credentials.TransportCredentials, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	if clientCAFile == "" {
		return credentials.NewTLS(cfg), nil
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate in it", clientCAFile)
	}
	// Verification happens after the handshake rather than in it, so a
	// client without a (valid) certificate still reaches the health service
	// and gets a status that says what is wrong instead of a TLS alert. The
	// handshake still proves the client holds the certificate's key.
	cfg.ClientAuth = tls.RequestClientCert
	return &clientCertCreds{TransportCredentials: credentials.NewTLS(cfg), roots: roots}, nil
}

// ClientCertInfo is the AuthInfo of a connection whose client certificates
// ServerCredentials checked. The caller's identity is the certificate's
// subject common name, or when that is empty its first URI SAN (a SPIFFE
// ID, say), or else its first DNS SAN.
type ClientCertInfo struct {
	credentials.TLSInfo
	Presented bool   // the client sent a certificate
	Identity  string // the caller's name, when the certificate is valid
	Err       error  // why the certificate is not accepted
}

type clientCertCreds struct {
	credentials.TransportCredentials
	roots *x509.CertPool
}

func (c *clientCertCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, ai, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok {
		return conn, ai, nil
	}
	return conn, verifyClient(info, c.roots, time.Now()), nil
}

func (c *clientCertCreds) Clone() credentials.TransportCredentials {
	return &clientCertCreds{TransportCredentials: c.TransportCredentials.Clone(), roots: c.roots}
}

// verifyClient checks the client's certificate chain once per connection.
func verifyClient(info credentials.TLSInfo, roots *x509.CertPool, now time.Time) ClientCertInfo {
	out := ClientCertInfo{TLSInfo: info}
	certs := info.State.PeerCertificates
	if len(certs) == 0 {
		return out
	}
	out.Presented = true
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		out.Err = err
		return out
	}
	out.Identity = certIdentity(certs[0])
	if out.Identity == "" {
		out.Err = errors.New("the certificate names nobody: no subject common name, URI or DNS name")
	}
	return out
}

func certIdentity(c *x509.Certificate) string {
	switch {
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return ""
}

// keyPair is a certificate and key read from files, read again when either
// file's modification time changes.
type keyPair struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	modified [2]time.Time
	checked  time.Time
}

// recheck is how often handshakes look at the files.
const recheck = 10 * time.Second

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if k.cert != nil && now.Sub(k.checked) < recheck {
		return k.cert, nil
	}
	k.checked = now
	var mod [2]time.Time
	for i, f := range []string{k.certFile, k.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			if k.cert != nil {
				return k.cert, nil // keep serving the last good pair during a rotation
			}
			return nil, fmt.Errorf("TLS certificate: %w", err)
		}
		mod[i] = st.ModTime()
	}
	if k.cert != nil && mod == k.modified {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil // a half-written pair: try again at the next check
		}
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	k.cert, k.modified = &cert, mod
	return k.cert, nil
}
