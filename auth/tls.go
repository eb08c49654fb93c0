package auth

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
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
// the certificates' caller prefix (Config.CertificateCallerPrefix); a
// common name that looks like a URI must be one of its URI SANs. An
// empty chain is a Certificate not Presented. A chain of more than
// maxClientIntermediates intermediates is refused unchecked, and what a
// chain was found to be is remembered for a while (certCacheTTL).
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
	if n := len(chain) - 1; n > maxClientIntermediates {
		// Each presented certificate whose subject fits is tried as a
		// parent, so a chain of made-up ones costs a signature check
		// apiece (up to x509's 100, half a second of P-521): refused
		// before any check.
		out.Err = fmt.Errorf("the chain holds %d intermediate certificates; at most %d", n, maxClientIntermediates)
		return out
	}
	roots := v.roots()
	key := chainKey(chain)
	if c, ok := v.certs.get(key, roots, now); ok {
		return c
	}
	if v.onCertVerify != nil {
		v.onCertVerify()
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	until := now.Add(certCacheTTL)
	chains, err := chain[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	switch {
	case err != nil:
		out.Err = err
		if nb := chain[0].NotBefore; nb.After(now) && nb.Before(until) {
			until = nb // not valid yet: checked again once it may be
		}
	case certIdentity(chain[0]) == "":
		out.Err = errors.New("the certificate names nobody: no subject common name, URI or DNS name")
	case uriCommonName(chain[0]):
		// The CN comes first, so it could name the caller of another's
		// URI SAN (a SPIFFE ID), which the CAs that issue those check
		// where they may not check a CN.
		out.Err = fmt.Errorf("the certificate's common name %q is a URI its URI SANs do not hold: a URI names a caller only as a URI SAN", chain[0].Subject.CommonName)
	default:
		out.Identity, out.Err = v.ns.name(engine.MethodCertificate, certIdentity(chain[0]))
		for _, c := range chains[0] {
			if c.NotAfter.Before(until) {
				until = c.NotAfter
			}
		}
	}
	v.certs.put(key, checkedCert{cert: out, roots: roots, until: until})
	return out
}

// The bounds of checking client certificates. A real chain is a leaf and
// one or two intermediates, perhaps its root as well. What a chain was
// found to be is remembered by its SHA-256 for up to certCacheTTL (never
// past the expiry of a certificate in it, nor past a change of the client
// CAs), so that the requests of one connection, which all present its
// chain, cost one check between them, not one each; at most certCacheSize
// chains are kept, and a full cache forgets an arbitrary one.
const (
	maxClientIntermediates = 4
	certCacheTTL           = time.Minute
	certCacheSize          = 4096
)

// certCache is what checkCertificate found for the chains it checked
// lately, by chainKey. The zero value is empty and ready.
type certCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]checkedCert
}

type checkedCert struct {
	cert  Certificate
	roots *x509.CertPool // the client CAs it was checked against
	until time.Time
}

func (c *certCache) get(key [sha256.Size]byte, roots *x509.CertPool, now time.Time) (Certificate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.roots != roots || !now.Before(e.until) {
		return Certificate{}, false
	}
	return e.cert, true
}

func (c *certCache) put(key [sha256.Size]byte, e checkedCert) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[sha256.Size]byte]checkedCert)
	}
	if len(c.m) >= certCacheSize {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = e
}

// chainKey is the SHA-256 of chain's certificates, each after its length.
func chainKey(chain []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range chain {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(c.Raw))))
		h.Write(c.Raw)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// uriCommonName reports whether c's common name looks like a URI
// ("spiffe://…") that none of its URI SANs is.
func uriCommonName(c *x509.Certificate) bool {
	cn := c.Subject.CommonName
	if !strings.Contains(cn, "://") {
		return false
	}
	for _, u := range c.URIs {
		if u.String() == cn {
			return false
		}
	}
	return true
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
