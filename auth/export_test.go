package auth

import (
	"crypto/tls"
	"time"
)

// CertificateGetter returns the GetCertificate function ServerTLS
// uses for the files, and a function that makes its next call look at the
// files again instead of waiting out the recheck interval.
func CertificateGetter(certFile, keyFile string) (get func() (*tls.Certificate, error), recheckNow func()) {
	k := &keyPair{certFile: certFile, keyFile: keyFile}
	return func() (*tls.Certificate, error) { return k.get(nil) },
		func() { k.mu.Lock(); k.checked = time.Time{}; k.mu.Unlock() }
}

// SetJWKSRefresh sets how often at most v fetches its issuer's keys again
// for a token signed by an unknown key (10 s outside tests).
func SetJWKSRefresh(v *Verifier, every time.Duration) { v.jwt.keys.every = every }

// ForgetVerifiedTokens empties v's verified-token cache.
func ForgetVerifiedTokens(v *Verifier) {
	v.jwt.mu.Lock()
	clear(v.jwt.verified)
	v.jwt.mu.Unlock()
}
