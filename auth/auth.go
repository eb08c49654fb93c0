// Package auth decides who a request comes from, the same way on every
// surface of a server.
//
// A Verifier turns the credentials a request carries (a bearer token, a TLS
// client certificate) into the caller's identity (an engine.Identity: its
// name, its groups, how it authenticated), or into the reason it refuses
// them; which tools that caller may call is package policy's to decide
// (the auth section's permissions are a policy.Permissions, the first
// rules of policy.Rules). Each surface has a thin adapter over the one
// Verifier that reads the credentials off its transport, asks Verify, and
// puts the caller into the request's context with engine.WithIdentity or
// answers the refusal in its protocol, with the Verifier's reason as it is:
// RequireCredentials is the HTTP adapter (func(http.Handler) http.Handler),
// and package service/auth holds gRPC's interceptors and transport
// credentials. So a token or a certificate names the same caller, and is
// refused for the same reason, on every port. Each way of naming callers
// (static tokens, client certificates, an OIDC issuer's JWTs) has a caller
// prefix, and New refuses a configuration in which two of them could name
// the same caller by accident (identity.go): one caller, one identity, so
// that everything kept per caller ID is that caller's. ServerConfig is the
// operator's configuration of it all (serve's tls_cert, tls_key, client_ca
// and auth keys), from which a program makes the Verifier its surfaces
// share and their TLS configuration (ServerTLS).
//
// It knows no RPC framework: it must not import gRPC or any surface.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/follow"
	"github.com/toolwire/toolwire/internal/tlsfiles"
)

// Config configures a Verifier. With neither tokens nor client CAs,
// authentication is off and every caller is the anonymous caller "".
type Config struct {
	// Tokens are the bearer tokens accepted. Several tokens may share a
	// name, so a token can be rotated without downtime.
	Tokens []Token
	// TokensFile, when set, is a file of more tokens, "name: token" a line
	// in the clear (ParseTokens), read again when it changes: a token
	// removed from it is refused (revoked), one added accepted, without a
	// restart, within 10 s. A change that cannot be read or does not parse
	// keeps the tokens the file held before, and is logged.
	TokensFile string
	// ClientCAs, when set, make a client certificate that chains to them
	// and allows client authentication name its caller (see
	// CheckCertificate). Default nil: client certificates name nobody.
	ClientCAs *x509.CertPool
	// ClientCAFile, when set, is ClientCAs read from a file, and read
	// again when it changes: a client CA rotated in place (a bundle with
	// the new CA beside the old) is trusted without a restart. It takes
	// ClientCAs' place.
	ClientCAFile *tlsfiles.CAs
	// CertificateCallerPrefix starts the ID of every caller a client
	// certificate names ("cert:" makes the certificate for agent-7 the
	// caller "cert:agent-7"); NoPrefix ("-") means none, on purpose. Unset
	// means none too, which New accepts only while no other way of naming
	// callers (static tokens, OIDC) is unprefixed: see the package's
	// identity rules (identity.go).
	CertificateCallerPrefix string
	// Groups are the groups of callers, by caller ID, whichever way they
	// authenticated: the Identity's Groups (a JWT's own groups besides).
	Groups map[string][]string
	// OIDC, when set, accepts bearer JWTs of an OpenID Connect issuer,
	// beside the static tokens; their claims name the caller and its
	// groups.
	OIDC *OIDCConfig
	// Logger receives what happens to the issuer's keys in the background
	// (a refresh that failed, keys the issuer no longer publishes); nil
	// means slog.Default().
	Logger *slog.Logger
}

// Verifier checks a request's credentials and names its caller. It is safe
// for concurrent use, and every surface of a server shares one.
type Verifier struct {
	bearer bool                  // static tokens are configured (Tokens, TokensFile)
	tokens func() *tokenSet      // the tokens as they are now
	roots  func() *x509.CertPool // the client CAs as they are now; nil: none
	groups map[string][]string
	jwt    *jwtVerifier // nil without OIDC
	ns     namespaces   // the ways callers are named
	certs  certCache    // the client certificate chains checked lately

	onCertVerify func() // tests: before each check of a chain against the client CAs
}

// tokenSet is the static tokens a Verifier accepts at one time.
type tokenSet struct {
	hashes [][sha256.Size]byte
	ids    []*engine.Identity // the identity each token proves, made once
	names  map[string]bool
}

// New returns a Verifier for cfg, or an error naming the token that is
// malformed or configured twice, or saying which caller prefix to set when
// two ways of authenticating could name the same caller by accident.
func New(cfg Config) (*Verifier, error) {
	static, err := newTokenSet(cfg.Tokens, cfg.Groups)
	if err != nil {
		return nil, err
	}
	v := &Verifier{groups: cfg.Groups, bearer: len(cfg.Tokens) > 0}
	v.tokens = func() *tokenSet { return static }
	if cfg.TokensFile != "" {
		// Authentication stays on while the file holds no token; tokens
		// may be added to it later only where their names cannot be
		// another way's callers'.
		v.bearer = true
		_, shared := newNamespaces(cfg, true)
		if v.tokens, err = followTokens(cfg, static, shared); err != nil {
			return nil, err
		}
	}
	if v.ns, err = newNamespaces(cfg, len(v.tokens().hashes) > 0); err != nil {
		return nil, err
	}
	ns := v.ns
	switch {
	case cfg.ClientCAFile != nil:
		v.roots = cfg.ClientCAFile.Pool
	case cfg.ClientCAs != nil:
		v.roots = func() *x509.CertPool { return cfg.ClientCAs }
	}
	if cfg.OIDC != nil {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		j, err := newJWTVerifier(*cfg.OIDC, ns, cfg.Groups, log)
		if err != nil {
			return nil, err
		}
		v.jwt = j
	}
	return v, nil
}

// emptyTokenHash is the SHA-256 of the empty token, which no token may be.
var emptyTokenHash = sha256.Sum256(nil)

// newTokenSet checks tokens and makes the set of them, or says which
// token is malformed or configured twice.
func newTokenSet(tokens []Token, groups map[string][]string) (*tokenSet, error) {
	set := &tokenSet{names: make(map[string]bool, len(tokens))}
	seen := make(map[[sha256.Size]byte]string, len(tokens))
	for i, t := range tokens {
		if t.Name == "" {
			return nil, fmt.Errorf("token %d has no name", i)
		}
		hexSum, ok := strings.CutPrefix(t.Hash, "sha256:")
		var h [sha256.Size]byte
		if n, err := hex.Decode(h[:], []byte(hexSum)); !ok || err != nil || n != sha256.Size || len(hexSum) != 2*sha256.Size {
			return nil, fmt.Errorf("token %q: hash %q is not \"sha256:\" and 64 hex digits", t.Name, t.Hash)
		}
		if h == emptyTokenHash {
			// What `printf %s "$TOKEN" | sha256sum` prints with TOKEN
			// unset: a token anyone could send.
			return nil, fmt.Errorf("token %q: %s is the hash of the empty token (was the token's variable unset when it was hashed?)", t.Name, t.Hash)
		}
		if other, dup := seen[h]; dup {
			return nil, fmt.Errorf("tokens %q and %q are the same token", other, t.Name)
		}
		seen[h] = t.Name
		set.names[t.Name] = true
		set.hashes = append(set.hashes, h)
		set.ids = append(set.ids, &engine.Identity{ID: t.Name, Groups: groups[t.Name], Method: engine.MethodToken})
	}
	return set, nil
}

// followTokens reads cfg.TokensFile, beside the static tokens, and
// returns what gives the tokens as the file holds them now: read again
// when it changes (internal/follow), so a token removed from it is
// refused and one added accepted without a restart. A file that cannot be
// read or does not parse then keeps the tokens it last held, and says so
// in the log; so does one that holds tokens where shared, when not nil,
// says static tokens would share their callers' names with another way of
// authenticating (a file empty at the start, beside unprefixed JWTs).
func followTokens(cfg Config, static *tokenSet, shared error) (func() *tokenSet, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	read := func() (*tokenSet, error) {
		b, err := follow.ReadFile(cfg.TokensFile)
		if err != nil {
			return nil, err
		}
		more, err := ParseTokens(b)
		if err != nil {
			return nil, err
		}
		if len(more) > 0 && shared != nil {
			return nil, shared
		}
		return newTokenSet(append(slices.Clip(cfg.Tokens), more...), cfg.Groups)
	}
	var loaded atomic.Bool
	file := follow.New(func() (*tokenSet, error) {
		set, err := read()
		switch {
		case err != nil && loaded.Load():
			log.Error("the tokens file changed but cannot be read; the tokens it held before stay in force", "tokens_file", cfg.TokensFile, "error", err.Error())
		case err == nil && loaded.Load():
			log.Info("the tokens file changed: its tokens are in force", "tokens_file", cfg.TokensFile, "tokens", len(set.hashes)-len(static.hashes))
		}
		return set, err
	}, cfg.TokensFile)
	if _, err := file.Get(); err != nil {
		return nil, fmt.Errorf("auth.tokens_file %s: %w", cfg.TokensFile, err)
	}
	loaded.Store(true)
	return func() *tokenSet { set, _ := file.Get(); return set }, nil
}

// Enabled reports whether v checks anything. When it does not, every
// request is the anonymous caller's, and an adapter need not read any
// credentials.
func (v *Verifier) Enabled() bool { return v.bearer || v.roots != nil || v.jwt != nil }

// AcceptsCertificates reports whether a client certificate can name a
// caller: whether a server should ask its clients for one.
func (v *Verifier) AcceptsCertificates() bool { return v.roots != nil }

// Credentials are what a request carries to prove who sent it, as its
// surface read them off its transport.
type Credentials struct {
	// Authorization holds the request's authorization values: gRPC's
	// "authorization" metadata, or HTTP's Authorization headers. More than
	// one is refused.
	Authorization []string
	// Certificate is the client certificate of the request's connection
	// as CheckCertificate found it, for a transport that checks it once
	// per connection. What it found holds for as long as the connection
	// lasts, past the certificate's expiry or its CA's removal: prefer
	// PeerCertificates, which Verify checks for each request (a chain's
	// check is remembered, so that costs a hash of it).
	Certificate Certificate
	// PeerCertificates is the certificate chain the client presented,
	// leaf first and not yet checked (http.Request.TLS.PeerCertificates);
	// Verify checks it when it needs it and Certificate is not set.
	PeerCertificates []*x509.Certificate
}

// Verify returns the identity of the caller creds prove, or an error whose
// text is the reason they prove none, for the surface to send as it is: missing
// credentials, more than one authorization value, a malformed one, an
// invalid bearer token, a client certificate rejected (expired, of an
// unknown authority, …). Any error means the request is unauthenticated.
//
// A request that carries a token is judged by the token, so a wrong token
// is refused even on a connection with a valid client certificate; one
// without by its certificate. With authentication off (see Enabled), every
// request is the anonymous caller (ID ""). The identity returned is shared:
// it must not be changed.
func (v *Verifier) Verify(ctx context.Context, creds Credentials) (*engine.Identity, error) {
	id, err := v.verify(ctx, creds)
	if err != nil && len(err.Error()) > maxReasonBytes {
		err = &cutReason{err}
	}
	return id, err
}

// ErrWouldWait is VerifyNow's answer when deciding would have waited for
// the network: an issuer's keys to fetch, which it has started. Verify
// decides.
var ErrWouldWait = errors.New("deciding needs the issuer's keys, which are being fetched")

// VerifyNow is Verify for a caller that must not wait, as a gRPC
// connection's reader may not (it decides each stream's credentials
// before the stream's message is read): it decides from what the
// Verifier holds, and answers ErrWouldWait where Verify would wait for an
// issuer's keys, having started to fetch them.
func (v *Verifier) VerifyNow(ctx context.Context, creds Credentials) (*engine.Identity, error) {
	if v.jwt == nil {
		return v.Verify(ctx, creds) // nothing to wait for
	}
	nw := &noWait{}
	id, err := v.Verify(context.WithValue(ctx, noWaitKey{}, nw), creds)
	if nw.would {
		return nil, ErrWouldWait
	}
	return id, err
}

// maxReasonBytes bounds the reason Verify gives. It may quote what a
// credential says (the names in a client's certificates, a token's
// claims), and every surface logs and sends it on each refused request: a
// client certificate naming its made-up issuer in 30 KiB would otherwise
// cost 30 KiB of log and of response per request of its connection.
const maxReasonBytes = 512

// cutReason is a reason longer than maxReasonBytes, cut to it.
type cutReason struct{ err error }

func (e *cutReason) Error() string {
	s := e.err.Error()[:maxReasonBytes]
	for !utf8.ValidString(s) { // a rune cut in two: at most three bytes
		s = s[:len(s)-1]
	}
	return s + "…"
}

func (e *cutReason) Unwrap() error { return e.err }

func (v *Verifier) verify(ctx context.Context, creds Credentials) (*engine.Identity, error) {
	if !v.Enabled() {
		return anonymous, nil
	}
	if vals := creds.Authorization; len(vals) > 0 {
		if len(vals) > 1 {
			// Which one a proxy or the server would read is a guess;
			// refuse rather than authenticate by one and audit by another.
			return nil, fmt.Errorf("%d authorization headers: send exactly one", len(vals))
		}
		if !v.bearer && v.jwt == nil {
			return nil, errors.New("this server does not accept bearer tokens; authenticate with a client certificate")
		}
		scheme, token, _ := strings.Cut(vals[0], " ")
		// Trimmed before it is judged empty: "Bearer " and a space must
		// not be the empty token, which no configuration names (see
		// newTokenSet) but a hash of nothing would match.
		token = strings.TrimSpace(token)
		if !strings.EqualFold(scheme, "bearer") || token == "" {
			return nil, errors.New(`malformed authorization header: want "Bearer <token>"`)
		}
		if v.jwt != nil && looksLikeJWT(token) {
			return v.jwt.verify(ctx, token)
		}
		if id, ok := v.lookup(token); ok {
			return id, nil
		}
		return nil, errors.New("invalid bearer token")
	}
	if v.roots != nil {
		cert := creds.Certificate
		if !cert.Presented && len(creds.PeerCertificates) > 0 {
			cert = v.CheckCertificate(creds.PeerCertificates)
		}
		if cert.Presented {
			if cert.Err != nil {
				return nil, fmt.Errorf("client certificate rejected: %w", cert.Err)
			}
			return &engine.Identity{ID: cert.Identity, Groups: v.groups[cert.Identity], Method: engine.MethodCertificate}, nil
		}
	}
	bearer := v.bearer || v.jwt != nil
	switch {
	case bearer && v.roots != nil:
		return nil, errors.New(`missing credentials: send an "authorization: Bearer <token>" header or a client certificate`)
	case v.roots != nil:
		return nil, errors.New("missing credentials: connect with a client certificate signed by the server's client CA")
	default:
		return nil, errors.New(`missing credentials: send an "authorization: Bearer <token>" header`)
	}
}

// anonymous is every request's identity when authentication is off.
var anonymous = &engine.Identity{}

// lookup returns the identity token proves. It compares the token's hash with every
// configured hash in constant time and visits all of them whatever matches,
// so the time taken tells nothing about which tokens exist.
func (v *Verifier) lookup(token string) (*engine.Identity, bool) {
	sum := sha256.Sum256([]byte(token))
	set := v.tokens()
	match := -1
	for i := range set.hashes {
		eq := subtle.ConstantTimeCompare(sum[:], set.hashes[i][:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return nil, false
	}
	return set.ids[match], true
}
