// Package tlsfiles keeps TLS material read from PEM files — a certificate
// and its key, a bundle of CA certificates — and reads it again when the
// files change (internal/follow), so that a rotation (cert-manager's
// certificates and trust bundles, an updated Secret) takes effect for new
// connections without a restart. The server's TLS and its client CA
// (auth), the CA and client certificate of a store reached over TLS
// (store/storeurl) and of gRPC sources, and OIDC's CA file share it.
package tlsfiles

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/toolwire/toolwire/internal/follow"
)

// KeyPair is a certificate and key read from files, read again when either
// file changes.
type KeyPair struct {
	f *follow.Files[*tls.Certificate]
}

// Load reads the pair in certFile and keyFile, and fails when it cannot.
func Load(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{follow.New(func() (*tls.Certificate, error) {
		cert, err := follow.ReadFile(certFile)
		if err != nil {
			return nil, err
		}
		key, err := follow.ReadFile(keyFile)
		if err != nil {
			return nil, err
		}
		c, err := tls.X509KeyPair(cert, key)
		return &c, err
	}, certFile, keyFile)}
	if _, err := k.Certificate(); err != nil {
		return nil, err
	}
	return k, nil
}

// Certificate returns the pair as the files hold it now.
func (k *KeyPair) Certificate() (*tls.Certificate, error) {
	c, err := k.f.Get()
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	return c, nil
}

// GetCertificate is Certificate as tls.Config.GetCertificate, a server's.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Certificate()
}

// GetClientCertificate is Certificate as tls.Config.GetClientCertificate,
// a client's.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.Certificate()
}

// Recheck makes the next use look at the files at once rather than within
// 10 s.
func (k *KeyPair) Recheck() { k.f.Recheck() }

// CAs is a bundle of CA certificates read from a PEM file, read again
// when it changes. A bundle that holds the old CA and the new one while a
// rotation is under way trusts both.
type CAs struct{ f *follow.Files[*x509.CertPool] }

// LoadCAs reads the CA certificates in file, and fails when it cannot or
// when the file holds none.
func LoadCAs(file string) (*CAs, error) { return loadCAs(file, false) }

// LoadCAsBesideSystem is LoadCAs for CAs trusted beside the system's.
func LoadCAsBesideSystem(file string) (*CAs, error) { return loadCAs(file, true) }

func loadCAs(file string, system bool) (*CAs, error) {
	c := &CAs{follow.New(func() (*x509.CertPool, error) {
		pem, err := follow.ReadFile(file)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if system {
			if sys, err := x509.SystemCertPool(); err == nil {
				pool = sys // a copy of its own
			}
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", file)
		}
		return pool, nil
	}, file)}
	if _, err := c.f.Get(); err != nil {
		return nil, err
	}
	return c, nil
}

// Pool returns the CAs as the file holds them now (the last good bundle
// while it cannot be read).
func (c *CAs) Pool() *x509.CertPool {
	pool, _ := c.f.Get() // an error only before the first read, which LoadCAs made
	return pool
}

// Recheck makes the next use look at the file at once rather than within
// 10 s.
func (c *CAs) Recheck() { c.f.Recheck() }

// VerifyServer returns a tls.Config.VerifyConnection that checks a
// server's certificate as crypto/tls does, its chain to the CAs as the
// file holds them at each connection and its name, for a client's
// tls.Config with InsecureSkipVerify set so that this check replaces
// crypto/tls's own, whose RootCAs are fixed. The name is the one the
// connection was made for (its ServerName, which a gRPC or HTTP client
// sets per connection), or name where that is empty: crypto/tls sends no
// server name for an IP address, so name must then be the address dialled
// (a host name or an IP address).
func (c *CAs) VerifyServer(name string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server presented no certificate")
		}
		serverName := cmp.Or(cs.ServerName, name)
		if serverName == "" {
			// x509 would check the chain alone: any certificate of the CAs
			// would pass for any server.
			return errors.New("tls: no server name to check the certificate against")
		}
		opts := x509.VerifyOptions{Roots: c.Pool(), DNSName: serverName, Intermediates: x509.NewCertPool()}
		for _, cert := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(cert)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
		}
		return nil
	}
}
