package auth

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/toolwire/toolwire/internal/tlsfiles"
	"github.com/toolwire/toolwire/policy"
)

// TokensEnv names the environment variable a server reads more tokens
// from, in the format of a tokens file (ParseTokens).
const TokensEnv = "TOOLWIRE_TOKENS"

// ServerConfig is the operator's configuration of a server's security:
// TLS, and who may call which tools. Its keys sit at the top level of
// serve's config file (tls_cert, tls_key, client_ca, auth). The zero value
// serves plaintext with authentication off.
type ServerConfig struct {
	TLSCert  string       `json:"tls_cert"`  // PEM certificate: serve TLS
	TLSKey   string       `json:"tls_key"`   // its PEM key
	ClientCA string       `json:"client_ca"` // PEM CA certificates: accept client certificates they sign
	Auth     CallerConfig `json:"auth"`
}

// CallerConfig is the "auth" section: the bearer tokens accepted, the
// callers' groups and the tools each caller may call.
type CallerConfig struct {
	TokensFile  string              `json:"tokens_file"` // "name: token" lines, in the clear
	Tokens      []Token             `json:"tokens"`      // name and "sha256:<hex>" hash
	Groups      map[string][]string `json:"groups"`      // caller ID → its groups, however it authenticated
	Permissions policy.Permissions  `json:"permissions"` // per caller ID ("*": everyone else)
	OIDC        *OIDCConfig         `json:"oidc"`        // bearer JWTs of an OpenID Connect issuer
	// CertificateCallerPrefix starts the IDs client certificates name
	// ("cert:"; "-": none, on purpose); see Config.
	CertificateCallerPrefix string `json:"certificate_caller_prefix"`
}

// oidc returns c's OIDC section, made when it had none.
func (c *CallerConfig) oidc() *OIDCConfig {
	if c.OIDC == nil {
		c.OIDC = &OIDCConfig{}
	}
	return c.OIDC
}

// Flags registers c's flags on fs; each writes into c.
func (c *ServerConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate `file`: serve TLS (with --tls-key)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key `file` of --tls-cert")
	fs.StringVar(&c.ClientCA, "client-ca", c.ClientCA, "PEM CA `file`: authenticate callers by client certificates it signs (mutual TLS; needs --tls-cert)")
	fs.StringVar(&c.Auth.TokensFile, "tokens-file", c.Auth.TokensFile, "`file` of bearer tokens, one \"name: token\" a line")
	fs.Func("oidc-issuer", "accept bearer JWTs of this OpenID Connect issuer `URL` (with --oidc-audience)", func(s string) error {
		c.Auth.oidc().Issuer = s
		return nil
	})
	fs.Func("oidc-audience", "the `audience` bearer JWTs must be for (with --oidc-issuer)", func(s string) error {
		c.Auth.oidc().Audience = s
		return nil
	})
}

// Validate checks what it can without reading files or the environment:
// the TLS settings go together, and the permissions' patterns parse.
func (c ServerConfig) Validate() error {
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case c.ClientCA != "" && c.TLSCert == "":
		return errors.New("--client-ca needs --tls-cert and --tls-key: client certificates are part of TLS")
	}
	for caller, groups := range c.Auth.Groups {
		for _, g := range groups {
			if caller == "" || g == "" {
				return fmt.Errorf("auth.groups: caller %q has an empty group or name; want \"caller: [group, …]\"", caller)
			}
		}
	}
	if c.Auth.OIDC != nil {
		if err := c.Auth.OIDC.check(); err != nil {
			return err
		}
	}
	if err := c.Auth.Permissions.Validate(); err != nil {
		return fmt.Errorf("auth.permissions: %w", err)
	}
	return nil
}

// Permissions returns the tool permissions by caller, the first rules of
// the server's policy.Rules; nil when none are configured.
func (c ServerConfig) Permissions() policy.Permissions {
	if len(c.Auth.Permissions) == 0 {
		return nil
	}
	return c.Auth.Permissions
}

// Verifier validates c, reads its tokens (c.Auth.Tokens, the tokens file,
// then the variable TokensEnv through getenv) and its client CA, and
// returns the Verifier that every surface of the server checks credentials
// with. It logs, on log, whether authentication is on, and warns about
// tokens over plaintext and about permissions without authentication.
func (c ServerConfig) Verifier(log *slog.Logger, getenv func(string) string) (*Verifier, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var roots *tlsfiles.CAs
	if c.ClientCA != "" {
		var err error
		// Read again when the file changes: a rotated client CA is
		// trusted without a restart.
		if roots, err = tlsfiles.LoadCAs(c.ClientCA); err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
	}
	tokens := append([]Token(nil), c.Auth.Tokens...)
	if env := getenv(TokensEnv); env != "" {
		more, err := ParseTokens([]byte(env))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", TokensEnv, err)
		}
		tokens = append(tokens, more...)
	}
	v, err := New(Config{Tokens: tokens, TokensFile: c.Auth.TokensFile, ClientCAFile: roots, Groups: c.Auth.Groups, OIDC: c.Auth.OIDC,
		CertificateCallerPrefix: c.Auth.CertificateCallerPrefix, Logger: log})
	if err != nil {
		if strings.HasPrefix(err.Error(), "auth") {
			return nil, err
		}
		return nil, fmt.Errorf("auth.tokens: %w", err)
	}
	v.WarnUnnamed(log, "auth.permissions", slices.Collect(maps.Keys(c.Auth.Permissions)))
	v.WarnUnnamed(log, "auth.groups", slices.Collect(maps.Keys(c.Auth.Groups)))

	switch {
	case v.Enabled():
		if c.TLSCert == "" {
			log.Warn("bearer tokens are accepted over plaintext: anyone who can read the traffic can read them; serve TLS (--tls-cert, --tls-key) unless a mesh encrypts it")
		}
		issuer := ""
		if c.Auth.OIDC != nil {
			issuer = c.Auth.OIDC.Issuer
		}
		log.Info("authentication on", "tokens", len(v.tokens().hashes), "client_certificates", c.ClientCA != "", "oidc_issuer", issuer)
		if o := c.Auth.OIDC; o != nil && o.GroupsPrefix == "" {
			// As two ways of naming callers would share names (identity.go),
			// the issuer's groups share the configuration's; unlike them,
			// this does not stop the server, since the issuer's groups may
			// be as the operator means them.
			log.Warn(`auth.oidc.groups_prefix is unset: the groups the issuer's tokens name are the configuration's groups as they are, so whoever may create or join a group at the issuer named like one the configuration means (auth.groups, approvers, CEL rules, the server view's "admin") gets its rights; set groups_prefix (such as "idp:": the issuer's group "admin" is then "idp:admin"), or "-" if the issuer's groups are yours on purpose`,
				"issuer", o.Issuer)
		}
		if len(v.tokens().hashes) == 0 && c.ClientCA == "" && c.Auth.OIDC == nil {
			log.Warn("the tokens file holds no token: every request is refused until one is added to it (it is read again when it changes)", "tokens_file", c.Auth.TokensFile)
		}
	case len(c.Auth.Permissions) > 0:
		log.Warn(`permissions are configured but authentication is off: every caller is the anonymous caller "", to which the "" or "*" entry applies`)
	}
	return v, nil
}

// TLS returns the TLS configuration of the server's ports (ServerTLS of
// c's files, asking for the client certificates v accepts), or nil when c
// serves plaintext.
func (c ServerConfig) TLS(v *Verifier) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	return ServerTLS(c.TLSCert, c.TLSKey, v)
}

// WarnUnnamed warns, on log, of each caller ID of names (the setting
// key's, such as approvers) that no credential v accepts can name, when
// authentication is on. Such a name is most likely a typo, or one that a
// caller prefix moved (a JWT caller now "oidc:alice"): its rules silently
// apply to nobody. "*" names everyone.
func (v *Verifier) WarnUnnamed(log *slog.Logger, key string, names []string) {
	if !v.Enabled() {
		return
	}
	names = slices.Sorted(slices.Values(names))
	for _, name := range slices.Compact(names) {
		if name != "*" && !v.ns.reaches(name, v.tokens().names) {
			log.Warn(key+" names a caller that no credential names: no token has that name, and certificates' and JWTs' callers start with their prefix",
				"caller", name, "prefixes", v.ns.prefixes())
		}
	}
}
