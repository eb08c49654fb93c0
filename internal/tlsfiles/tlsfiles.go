// Package tlsfiles keeps a certificate and its key read from PEM files,
// and reads them again when the files change, so that a rotated
// certificate (cert-manager's, say) takes effect for new connections
// without a restart. The server's TLS (auth.ServerTLS) and the client
// certificate a store presents to Redis (store/storeurl) share it.
package tlsfiles

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// recheck is how often a KeyPair looks at its files.
const recheck = 10 * time.Second

// KeyPair is a certificate and key read from files, read again when either
// file's modification time changes (looked at once every 10 s at most).
// While a new pair cannot be read (a file missing or half written during
// a rotation) the last good one stays in use.
type KeyPair struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	modified [2]time.Time
	checked  time.Time
}

// Load reads the pair in certFile and keyFile, and fails when it cannot.
func Load(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	if _, err := k.Certificate(); err != nil {
		return nil, err
	}
	return k, nil
}

// Certificate returns the pair as the files hold it now.
func (k *KeyPair) Certificate() (*tls.Certificate, error) {
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
				return k.cert, nil // keep the last good pair during a rotation
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
func (k *KeyPair) Recheck() {
	k.mu.Lock()
	k.checked = time.Time{}
	k.mu.Unlock()
}
