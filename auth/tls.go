package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/tlsfiles"
)

// ServerTLS returns the TLS configuration of a server whose certificate and
// key are in the PEM files certFile and keyFile, for every port it serves.
// The files are read again when they change, so a rotated certificate takes
// effect for new connections without a restart.
//
// When v accepts client certificates, clients are asked for one but not
// refused without one: the handshake proves that a client holds its
// certificate's key, and the surface's adapter has v check the certificate
// after the handshake (see Credentials), so that a client without a
// (valid) certificate still reaches what a surface serves unauthenticated,
// health checks, and is told why it is refused instead of getting a bare
// TLS alert. v may be nil: no client certificates.
func ServerTLS(certFile, keyFile string, v *Verifier) (*tls.Config, error) {
	kp, err := tlsfiles.Load(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.GetCertificate}
	if v != nil && v.AcceptsCertificates() {
		cfg.ClientAuth = tls.RequestClientCert
	}
	return cfg, nil
}

// Certificate is a client certificate as CheckCertificate found it.
type Certificate struct {
	Presented bool   // the client sent a certificate
	Identity  string // the ID of the caller it names (with auth.certificate_caller_prefix), when it is valid
	Err       error  // why it is not accepted
}

// CheckCertificate checks chain, the certificates a client presented (leaf
// first), against v's client CAs at the current time: the leaf must chain
// to one of them through the others and allow client authentication. The
// caller it names is the leaf's subject common name, or when that is empty
// its first URI SAN (a SPIFFE ID, say), or else its first DNS SAN, after
// the certificates' caller prefix (Config.CertificateCallerPrefix). An
// empty chain is a Certificate not Presented.
func (v *Verifier) CheckCertificate(chain []*x509.Certificate) Certificate {
	return v.checkCertificate(chain, time.Now())
}

func (v *Verifier) checkCertificate(chain []*x509.Certificate, now time.Time) Certificate {
	if len(chain) == 0 {
		return Certificate{}
	}
	out := Certificate{Presented: true}
	if v.roots == nil {
		out.Err = errors.New("this server does not accept client certificates")
		return out
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{
		Roots: v.roots(), Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		out.Err = err
		return out
	}
	name := certIdentity(chain[0])
	if name == "" {
		out.Err = errors.New("the certificate names nobody: no subject common name, URI or DNS name")
		return out
	}
	out.Identity, out.Err = v.ns.name(engine.MethodCertificate, name)
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
