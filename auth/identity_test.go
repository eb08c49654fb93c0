package auth_test

import (
	"context"
	"crypto/x509"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/testoidc"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	"github.com/toolwire/toolwire/policy"
)

// TestCallerNamespacesMustNotCollide: a configuration in which two ways of
// authenticating would name callers without a prefix, so that a JWT or a
// certificate naming "alice" would be the static token "alice", is
// refused, saying what to set; one way alone keeps its bare names.
func TestCallerNamespacesMustNotCollide(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	pool := testpki.New(t, "ca").Pool()
	tokens := []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}
	oidc := func(prefix string) *auth.OIDCConfig {
		return &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: prefix}
	}
	for _, tc := range []struct {
		name string
		cfg  auth.Config
		want []string // in the error; none: accepted
	}{
		{name: "tokens alone", cfg: auth.Config{Tokens: tokens}},
		{name: "certificates alone", cfg: auth.Config{ClientCAs: pool}},
		{name: "OIDC alone", cfg: auth.Config{OIDC: oidc("")}},
		{name: "tokens and OIDC", cfg: auth.Config{Tokens: tokens, OIDC: oidc("")}, want: []string{
			`auth: static tokens and JWTs of ` + iss.URL + ` both name callers without a prefix, so a JWT whose "sub" is "alice" would be the same caller as the static token named "alice"`,
			`set auth.oidc.caller_prefix (such as "oidc:": its callers are then "oidc:alice"), or "-" to make the names one on purpose`}},
		{name: "tokens and OIDC by another claim", cfg: auth.Config{Tokens: tokens, OIDC: &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerClaim: "email"}},
			want: []string{`a JWT whose "email" is "alice"`}},
		{name: "tokens and certificates", cfg: auth.Config{Tokens: tokens, ClientCAs: pool}, want: []string{
			`a client certificate for "alice" would be the same caller as the static token named "alice"`,
			`set auth.certificate_caller_prefix (such as "cert:"`}},
		{name: "certificates and OIDC", cfg: auth.Config{ClientCAs: pool, OIDC: oidc("")}, want: []string{
			`set auth.certificate_caller_prefix (such as "cert:": its callers are then "cert:alice") or auth.oidc.caller_prefix (such as "oidc:"`}},
		{name: "all three", cfg: auth.Config{Tokens: tokens, ClientCAs: pool, OIDC: oidc("")}, want: []string{
			`auth: static tokens, client certificates and JWTs of ` + iss.URL + ` all name callers without a prefix`,
			`set auth.certificate_caller_prefix (such as "cert:": its callers are then "cert:alice") and auth.oidc.caller_prefix`}},
		{name: "all three, OIDC prefixed", cfg: auth.Config{Tokens: tokens, ClientCAs: pool, OIDC: oidc("oidc:")}, want: []string{"auth.certificate_caller_prefix"}},
		{name: "tokens and OIDC prefixed", cfg: auth.Config{Tokens: tokens, OIDC: oidc("oidc:")}},
		{name: "tokens and OIDC merged on purpose", cfg: auth.Config{Tokens: tokens, OIDC: oidc(auth.NoPrefix)}},
		{name: "all three, certificates merged on purpose", cfg: auth.Config{Tokens: tokens, ClientCAs: pool, CertificateCallerPrefix: "-", OIDC: oidc("oidc:")}},
		{name: "certificates and OIDC, one prefixed", cfg: auth.Config{ClientCAs: pool, OIDC: oidc("oidc:")}},
		{name: "a long prefix", cfg: auth.Config{OIDC: oidc(strings.Repeat("p", 65))}, want: []string{"auth.oidc.caller_prefix: 65 bytes; at most 64"}},
		{name: "a prefix with spaces", cfg: auth.Config{OIDC: oidc("oidc: ")}, want: []string{`auth.oidc.caller_prefix "oidc: ": a prefix has no leading or trailing spaces`}},
	} {
		_, err := auth.New(tc.cfg)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v; want it accepted", tc.name, err)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want an error containing %q", tc.name, err, w)
			}
		}
	}
}

// TestOneCallerOneIdentity: with prefixes, the static token "alice", a
// JWT whose sub is "alice" and a certificate for "alice" are three
// callers, each with the groups configured for its ID; a credential whose
// name falls in another method's namespace is refused; a static token the
// operator names in a prefixed namespace, or a prefix of "-", joins
// callers on purpose.
func TestOneCallerOneIdentity(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	ca := testpki.New(t, "ca")
	const ciToken = "ci-token-0123456789abcdef"
	groups := map[string][]string{"alice": {"humans"}, "oidc:alice": {"sso"}, "cert:alice": {"machines"}, "oidc:ci": {"pipelines"}}
	v := mustNew(t, auth.Config{
		Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}, {Name: "oidc:ci", Hash: auth.HashToken(ciToken)}},
		OIDC:   &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: "oidc:", GroupsPrefix: "idp:"},
		Groups: groups, ClientCAs: ca.Pool(), CertificateCallerPrefix: "cert:",
	})
	jwt := func(sub string) auth.Credentials {
		return auth.Credentials{Authorization: []string{"Bearer " + iss.Token(t, "ec-1", testoidc.Claims{"sub": sub, "aud": "toolwire", "groups": []string{"admins"}})}}
	}
	cert := func(cn string) auth.Credentials {
		return auth.Credentials{PeerCertificates: []*x509.Certificate{ca.Issue(t, testpki.Client(cn)).Leaf}}
	}
	for _, tc := range []struct {
		name       string
		creds      auth.Credentials
		id, method string
		groups     []string
	}{
		{"static token", auth.Credentials{Authorization: []string{"Bearer " + aliceToken}}, "alice", engine.MethodToken, []string{"humans"}},
		// The issuer's groups prefixed, then the configured ones.
		{"JWT", jwt("alice"), "oidc:alice", engine.MethodJWT, []string{"idp:admins", "sso"}},
		{"certificate", cert("alice"), "cert:alice", engine.MethodCertificate, []string{"machines"}},
		{"a token named in the JWT namespace", auth.Credentials{Authorization: []string{"Bearer " + ciToken}}, "oidc:ci", engine.MethodToken, []string{"pipelines"}},
		{"the JWT caller of that name", jwt("ci"), "oidc:ci", engine.MethodJWT, []string{"idp:admins", "pipelines"}},
		// Prefixes are not escapes: the certificate "oidc:x" is "cert:oidc:x".
		{"a certificate named like a JWT caller", cert("oidc:alice"), "cert:oidc:alice", engine.MethodCertificate, nil},
	} {
		id, err := v.Verify(context.Background(), tc.creds)
		if err != nil || id.ID != tc.id || id.Method != tc.method || !slices.Equal(id.Groups, tc.groups) {
			t.Errorf("%s: %+v, %v; want %q by %s in %q", tc.name, id, err, tc.id, tc.method, tc.groups)
		}
	}

	// Unprefixed JWTs beside prefixed certificates: a JWT may not name a
	// caller of the certificates' namespace, nor a certificate one of a
	// longer prefix than its own.
	v = mustNew(t, auth.Config{
		OIDC:      &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: auth.NoPrefix},
		ClientCAs: ca.Pool(), CertificateCallerPrefix: "c:",
	})
	if id, err := v.Verify(context.Background(), jwt("c:alice")); err == nil || !strings.Contains(err.Error(), `invalid JWT: the caller it names, "c:alice", starts with "c:", the prefix of the callers of client certificates`) {
		t.Errorf("a JWT naming a certificate's caller: %+v, %v; want it refused", id, err)
	}
	if id, err := v.Verify(context.Background(), jwt("bob")); err != nil || id.ID != "bob" {
		t.Errorf("a JWT of no prefix: %+v, %v", id, err)
	}
	v = mustNew(t, auth.Config{
		OIDC:      &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: "c:o:"},
		ClientCAs: ca.Pool(), CertificateCallerPrefix: "c:",
	})
	if id, err := v.Verify(context.Background(), cert("o:alice")); err == nil || !strings.Contains(err.Error(), `client certificate rejected: the caller it names, "c:o:alice", starts with "c:o:", the prefix of the callers of JWTs of `) {
		t.Errorf("a certificate naming a JWT's caller: %+v, %v; want it refused", id, err)
	}

	// A name past its bound names nobody.
	if id, err := v.Verify(context.Background(), jwt(strings.Repeat("a", 2049))); err == nil || !strings.Contains(err.Error(), "invalid JWT: the caller's name is 2049 bytes long; at most 2048") {
		t.Errorf("a JWT naming a caller of 2049 bytes: %+v, %v; want it refused", id, err)
	}
	if id, err := v.Verify(context.Background(), cert(strings.Repeat("a", 2049))); err == nil || !strings.Contains(err.Error(), "client certificate rejected: the caller's name is 2049 bytes long") {
		t.Errorf("a certificate naming a caller of 2049 bytes: %+v, %v; want it refused", id, err)
	}

	// Joined on purpose: "-" makes the JWT alice the token alice.
	v = mustNew(t, auth.Config{
		Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}},
		OIDC:   &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: auth.NoPrefix},
		Groups: groups,
	})
	if id, err := v.Verify(context.Background(), jwt("alice")); err != nil || id.ID != "alice" || !slices.Equal(id.Groups, []string{"admins", "humans"}) {
		t.Errorf("a JWT joined to the tokens on purpose: %+v, %v; want alice in admins, humans", id, err)
	}
}

// TestServerConfigWarnsOfNamesNoCredentialProves: permissions or groups
// for a name that no token has and no certificate or JWT can name (most
// likely a JWT caller's name from before its prefix) are reported at
// start.
func TestServerConfigWarnsOfNamesNoCredentialProves(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	cfg := auth.ServerConfig{Auth: auth.CallerConfig{
		Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}},
		OIDC:   &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: "oidc:"},
		Permissions: policy.Permissions{"alice": {Allow: []string{"echo"}}, "bob": {Allow: []string{"echo"}},
			"oidc:carol": {Allow: []string{"echo"}}, "*": {Deny: []string{"*"}}},
		Groups: map[string][]string{"dave": {"x"}, "oidc:erin": {"y"}},
	}}
	var logs strings.Builder
	if _, err := cfg.Verifier(slog.New(slog.NewTextHandler(&logs, nil)), noEnv); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`msg="auth.permissions names a caller that no credential names`, `caller=bob prefixes="JWTs of ` + iss.URL + `: \"oidc:\""`,
		`msg="auth.groups names a caller that no credential names`, "caller=dave",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
	for _, name := range []string{"caller=alice", "caller=oidc:carol", "caller=oidc:erin", `caller="*"`} {
		if strings.Contains(logs.String(), name) {
			t.Errorf("the log warns of %s, which a credential names:\n%s", name, logs.String())
		}
	}

	// The callers other settings name, checked the same way.
	v, err := cfg.Verifier(discard, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	v.WarnUnnamed(slog.New(slog.NewTextHandler(&logs, nil)), "approvers", []string{"alice", "alcie", "oidc:carol", "alcie"})
	if got := strings.Count(logs.String(), `msg="approvers names a caller that no credential names`); got != 1 || !strings.Contains(logs.String(), "caller=alcie") {
		t.Errorf("approvers [alice alcie oidc:carol alcie]: %d warnings; want one, of alcie:\n%s", got, logs.String())
	}

	// A mixed configuration fails at start, naming what to set.
	cfg.Auth.OIDC.CallerPrefix = ""
	if _, err := cfg.Verifier(discard, noEnv); err == nil || !strings.HasPrefix(err.Error(), "auth: static tokens and JWTs of "+iss.URL+" both name callers without a prefix") {
		t.Errorf("tokens and unprefixed JWTs: %v; want the collision refused", err)
	}
}

// TestCallerNamesArePrintable: a caller's name, as a JWT's claim or a
// certificate gives it, is printable text: a newline, a NUL, a bidi
// override (U+202E shows "alice" for "ecila") or a zero-width character
// would make one caller read as another in logs, the audit trail and the
// server view. Any script is text.
func TestCallerNamesArePrintable(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	ca := testpki.New(t, "ca")
	v := mustNew(t, auth.Config{OIDC: &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", CallerPrefix: "oidc:"},
		ClientCAs: ca.Pool(), CertificateCallerPrefix: "cert:"})
	verify := func(creds auth.Credentials) (*engine.Identity, error) { return v.Verify(context.Background(), creds) }
	jwt := func(sub string) auth.Credentials {
		return auth.Credentials{Authorization: []string{"Bearer " + iss.Token(t, "ec-1", testoidc.Claims{"sub": sub, "aud": "toolwire"})}}
	}
	cert := func(cn string) auth.Credentials {
		return auth.Credentials{PeerCertificates: []*x509.Certificate{ca.Issue(t, testpki.Client(cn)).Leaf}}
	}
	for _, name := range []string{"alice", "système", "名前", "system:serviceaccount:agents:builder", "a b"} {
		if id, err := verify(jwt(name)); err != nil || id.ID != "oidc:"+name {
			t.Errorf("JWT %q: %+v, %v", name, id, err)
		}
		if id, err := verify(cert(name)); err != nil || id.ID != "cert:"+name {
			t.Errorf("certificate %q: %+v, %v", name, id, err)
		}
	}
	for _, name := range []string{"ali\nce", "alice\x00", "\u202eecila", "al\u200bice", "alice\u2066"} {
		if id, err := verify(jwt(name)); err == nil || !strings.Contains(err.Error(), "a caller's name is printable text") {
			t.Errorf("JWT %q: %+v, %v; want it refused", name, id, err)
		}
		if id, err := verify(cert(name)); err == nil || !strings.Contains(err.Error(), "a caller's name is printable text") {
			t.Errorf("certificate %q: %+v, %v; want it refused", name, id, err)
		}
	}
}
