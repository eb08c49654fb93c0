package auth

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolwire/toolwire/engine"
)

// One caller, one identity. A caller's ID is all that permissions,
// approvers, idempotency keys, sessions, rate limits, detached batches,
// the audit trail, CEL's caller.id and an MCP session are scoped by, so two
// ways of authenticating must not name the same ID by accident: a JWT
// whose "sub" is "alice" must not be the static token named "alice".
//
// Each way callers are named is a namespace with a prefix its IDs start
// with: static tokens have none (their names are what the operator wrote);
// client certificates have auth.certificate_caller_prefix, JWTs
// auth.oidc.caller_prefix. The prefix "-" says "none, on purpose": those
// callers share their names with the unprefixed ones, as the operator
// wants. A prefix left unset is none too, which is safe only while one
// namespace is unprefixed: New refuses a configuration in which two are,
// rather than guessing which to rename (renaming would silently move a
// caller's permissions, policies and state to another name). So existing
// configurations with one way of naming callers keep their IDs, and a
// mixed one fails at start saying what to set.
//
// An ID names one namespace's caller: the one whose prefix is the longest
// the ID starts with. A certificate or a JWT naming an ID in a namespace
// with a longer prefix than its own (a JWT of an unprefixed issuer whose
// "sub" is "cert:alice", beside certificates prefixed "cert:") is refused.
// A static token's name is the operator's deliberate choice, so a token
// named "oidc:alice" is that JWT caller's name too: the way to give one JWT
// caller a static token as well.

// NoPrefix, as auth.oidc.caller_prefix or auth.certificate_caller_prefix,
// says that those callers' IDs are their names as they are, shared on
// purpose with the callers of other methods of the same names.
const NoPrefix = "-"

// The bounds of a caller's name as a certificate or JWT gives it (a
// SPIFFE ID is at most 2048 bytes) and of a caller prefix, so that a
// caller's ID, which keys every store and lands in every log line, is
// bounded whatever a credential says.
const (
	maxCallerNameBytes = 2048
	maxPrefixBytes     = 64
)

// namespace is one way callers are named.
type namespace struct {
	method string // engine.MethodToken, MethodCertificate or MethodJWT
	what   string // for messages: "static tokens", "client certificates", "JWTs of <issuer>"
	key    string // the setting of its prefix; "" for static tokens
	prefix string // as configured: "" unset, NoPrefix, or a prefix
}

// id returns the ID of the caller name names in n.
func (n namespace) id(name string) string {
	if n.prefix == NoPrefix {
		return name
	}
	return n.prefix + name
}

// effective is the prefix n's IDs start with.
func (n namespace) effective() string {
	if n.prefix == NoPrefix {
		return ""
	}
	return n.prefix
}

// namespaces are the ways a Verifier names callers.
type namespaces []namespace

// newNamespaces returns cfg's namespaces, static tokens among them when
// tokens says there are some, or an error saying what to set when two of
// them could name the same caller by accident.
func newNamespaces(cfg Config, tokens bool) (namespaces, error) {
	var ns namespaces
	if tokens {
		ns = append(ns, namespace{method: engine.MethodToken, what: "static tokens"})
	}
	if cfg.ClientCAs != nil || cfg.ClientCAFile != nil {
		ns = append(ns, namespace{method: engine.MethodCertificate, what: "client certificates",
			key: "auth.certificate_caller_prefix", prefix: cfg.CertificateCallerPrefix})
	}
	if cfg.OIDC != nil {
		ns = append(ns, namespace{method: engine.MethodJWT, what: "JWTs of " + cfg.OIDC.Issuer,
			key: "auth.oidc.caller_prefix", prefix: cfg.OIDC.CallerPrefix})
	}
	var unset []namespace
	for _, n := range ns {
		if n.prefix == "" {
			unset = append(unset, n)
		}
		if strings.TrimSpace(n.prefix) != n.prefix {
			return nil, fmt.Errorf("%s %q: a prefix has no leading or trailing spaces", n.key, n.prefix)
		}
		if len(n.prefix) > maxPrefixBytes {
			return nil, fmt.Errorf("%s: %d bytes; at most %d", n.key, len(n.prefix), maxPrefixBytes)
		}
	}
	if len(unset) < 2 {
		return ns, nil
	}
	a, b := unset[0], unset[1]
	example := map[string]string{engine.MethodCertificate: "cert:", engine.MethodJWT: "oidc:"}
	var set []string
	for _, n := range unset {
		if n.key != "" {
			set = append(set, fmt.Sprintf("%s (such as %q: its callers are then %q)", n.key, example[n.method], example[n.method]+"alice"))
		}
	}
	whats := make([]string, len(unset))
	for i, n := range unset {
		whats[i] = n.what
	}
	both := "both"
	if len(unset) > 2 {
		both = "all"
	}
	// Static tokens have no prefix: beside them every other method needs
	// one; else one of two may go without.
	join := " or "
	if unset[0].method == engine.MethodToken {
		join = " and "
	}
	return nil, fmt.Errorf(`auth: %s and %s %s name callers without a prefix, so %s would be the same caller as %s, `+
		`with its permissions, batches and state: set %s, or %q to make the names one on purpose`,
		strings.Join(whats[:len(whats)-1], ", "), whats[len(whats)-1], both, naming(b, cfg), naming(a, cfg), strings.Join(set, join), NoPrefix)
}

// naming is a credential of n that names "alice", for messages.
func naming(n namespace, cfg Config) string {
	switch n.method {
	case engine.MethodToken:
		return `the static token named "alice"`
	case engine.MethodCertificate:
		return `a client certificate for "alice"`
	}
	claim := cfg.OIDC.CallerClaim
	if claim == "" {
		claim = "sub"
	}
	return fmt.Sprintf(`a JWT whose %q is "alice"`, claim)
}

// of returns the namespace of method.
func (ns namespaces) of(method string) namespace {
	for _, n := range ns {
		if n.method == method {
			return n
		}
	}
	return namespace{method: method}
}

// name returns the ID of the caller that a credential of method names
// name, or why that ID is not its to name: it starts with another
// namespace's longer prefix.
func (ns namespaces) name(method, name string) (string, error) {
	if len(name) > maxCallerNameBytes {
		return "", fmt.Errorf("the caller's name is %d bytes long; at most %d", len(name), maxCallerNameBytes)
	}
	if i, r, bad := unprintable(name); bad {
		return "", fmt.Errorf("the caller's name holds %U at byte %d: a caller's name is printable text, shown as it is in logs, the audit trail and the server view", r, i)
	}
	self := ns.of(method)
	id := self.id(name)
	for _, o := range ns {
		if p := o.effective(); len(p) > len(self.effective()) && strings.HasPrefix(id, p) {
			return "", fmt.Errorf("the caller it names, %q, starts with %q, the prefix of the callers of %s", id, p, o.what)
		}
	}
	return id, nil
}

// unprintable finds the first rune of name that is not text as it is
// shown: invalid UTF-8, a control character (a newline, NUL) or a
// formatting one (U+202E, which shows "alice" for "ecila", a zero-width
// space), so that a certificate or a token cannot name a caller that
// reads as another in a log line or the server view.
func unprintable(name string) (int, rune, bool) {
	for i, r := range name {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return i, r, true
		}
	}
	return 0, 0, false
}

// reaches reports whether some credential could name the caller id: a
// token of that name, or a namespace of certificates or JWTs whose IDs it
// could be.
func (ns namespaces) reaches(id string, tokens map[string]bool) bool {
	if tokens[id] {
		return true
	}
	for _, n := range ns {
		if n.method != engine.MethodToken && strings.HasPrefix(id, n.effective()) {
			return true
		}
	}
	return false
}

// prefixes describes the prefixes of ns's certificates and JWTs, for
// messages: "client certificates: cert:", "JWTs of …: none".
func (ns namespaces) prefixes() string {
	var out []string
	for _, n := range ns {
		if n.method == engine.MethodToken {
			continue
		}
		p := strconv.Quote(n.effective())
		if p == `""` {
			p = "none"
		}
		out = append(out, n.what+": "+p)
	}
	return strings.Join(out, "; ")
}
