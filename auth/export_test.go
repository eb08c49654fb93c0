package auth

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// SetJWKSRefresh sets how often at most v fetches its issuer's keys again
// for a token signed by an unknown key (10 s outside tests).
func SetJWKSRefresh(v *Verifier, every time.Duration) { v.jwt.keys.every = every }

// ForgetVerifiedTokens empties v's verified-token cache.
func ForgetVerifiedTokens(v *Verifier) {
	v.jwt.mu.Lock()
	clear(v.jwt.verified)
	v.jwt.mu.Unlock()
}

// Clock is a clock for a Verifier's key set that a test moves.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// UseClock makes v's key set age by a Clock, starting now, which it returns.
// Call it before v checks any token.
func UseClock(v *Verifier) *Clock {
	c := &Clock{now: time.Now()}
	v.jwt.keys.now = c.Now
	return c
}

// OnKeysLoaded makes v call f after each fetch (or read of jwks_file) of
// its key set, with its error, including those in the background. Call it
// before v checks any token.
func OnKeysLoaded(v *Verifier, f func(error)) { v.jwt.keys.onLoad = f }

// CacheAge is how long a key set fetched with header h is used.
func CacheAge(h http.Header) time.Duration { return cacheAge(h) }

// The bounds of a key set's age.
const (
	JWKSDefaultAge  = jwksDefaultAge
	JWKSMinAge      = jwksMinAge
	JWKSMaxAge      = jwksMaxAge
	JWKSFileRecheck = jwksFileRecheck
)

// CountCertificateChecks makes v count each check of a client
// certificate chain against its CAs, and returns the count.
func CountCertificateChecks(v *Verifier) *atomic.Int64 {
	var n atomic.Int64
	v.onCertVerify = func() { n.Add(1) }
	return &n
}

// MaxClientIntermediates is the most intermediate certificates a client's
// chain may hold.
const MaxClientIntermediates = maxClientIntermediates

// DialKeysVia makes v's key set reach every host at addr, as if the
// network resolved every name to it.
func DialKeysVia(v *Verifier, addr string) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	v.jwt.keys.client.Transport = tr
}
