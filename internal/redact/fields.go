package redact

import "strings"

// What follows keeps secrets out of what records a call's arguments: the
// audit trail (audit_arguments) and spans (trace_content). A field is
// taken for a secret by its name; its value is replaced by "[redacted]".

// SecretNames are the names secrets commonly travel under, gathered
// from what gitleaks' rules key on, the OWASP logging cheat sheet's list
// of what never to log, and HTTP's credential headers. A field whose name,
// lower-cased and with everything but letters and digits left out, ends in
// one of them is always redacted: "password" names db_password, Password
// and user-password; "token" names access_token,
// refresh_token, id_token, GITHUB_TOKEN and X-Auth-Token; "apikey" names
// api_key, apiKey, api-key and x-api-key.
var SecretNames = []string{
	"password", "passwd", "passphrase",
	"secret",           // client_secret, secret, webhook_secret
	"token",            // access_token, refresh_token, id_token, bearer_token, session_token, csrf_token
	"apikey",           // api_key, apiKey, api-key, x-api-key
	"accesskey",        // aws_secret_access_key, access_key
	"privatekey",       // private_key, privateKey, ssh_private_key
	"secretkey",        // secret_key, stripe_secret_key
	"signingkey",       // signing_key
	"encryptionkey",    // encryption_key
	"authorization",    // Authorization, proxy-authorization
	"auth",             // auth, basic_auth, http_auth, oauth
	"cookie",           // cookie, set-cookie
	"credential",       // credential, client_credential
	"credentials",      // credentials, aws_credentials
	"connectionstring", // connection_string: a DSN with its password
	"dsn",              // dsn, database_dsn
	"clientassertion",  // OAuth's client_assertion, a signed credential
	"samlresponse",     // SAMLResponse
}

// notSecret are names that end in a secret's name but hold none: paging
// cursors, counts of a model's tokens.
var notSecret = map[string]bool{
	"pagetoken": true, "nextpagetoken": true, "continuationtoken": true, "maxtokens": true,
}

// Fields replaces the values of secret fields: those named by SecretNames
// and by the names given to NewFields.
type Fields struct {
	suffixes []string        // SecretNames
	exact    map[string]bool // the configured names, normalized
}

// NewFields returns what redacts the fields SecretNames names, and those
// named more (exactly, but for case and separators).
func NewFields(more []string) Fields {
	r := Fields{suffixes: SecretNames, exact: map[string]bool{}}
	for _, s := range more {
		if n := normalize(s); n != "" {
			r.exact[n] = true
		}
	}
	return r
}

// normalize lower-cases name and leaves out everything but ASCII letters
// and digits, so that api_key, apiKey, API-KEY and "api key" are one name.
func normalize(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b.WriteByte(c)
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		}
	}
	return b.String()
}

// secret tells whether a field named name holds a secret.
func (r Fields) secret(name string) bool {
	n := normalize(name)
	if n == "" || notSecret[n] {
		return false
	}
	if r.exact[n] {
		return true
	}
	for _, s := range r.suffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// valueKeys are the fields that hold the value of a name/value pair, the
// shape headers, cookies and environment variables often travel in
// ({"name": "Authorization", "value": "Bearer …"}).
var valueKeys = [...]string{"value", "values"}

// pairNameKeys are the fields that name such a pair.
var pairNameKeys = [...]string{"name", "key", "header"}

// Apply replaces, in place, the values of the secret fields of v (a value
// encoding/json decoded) at any depth, and the value of a name/value pair
// whose name is a secret's, and returns v.
func (r Fields) Apply(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if r.secret(k) {
				v[k] = "[redacted]"
			} else {
				v[k] = r.Apply(x)
			}
		}
		for _, nk := range pairNameKeys {
			if name, ok := v[nk].(string); ok && r.secret(name) {
				for _, vk := range valueKeys {
					if _, ok := v[vk]; ok {
						v[vk] = "[redacted]"
					}
				}
			}
		}
	case []any:
		for i, x := range v {
			v[i] = r.Apply(x)
		}
	}
	return v
}
