package redact

import "testing"

// TestFieldNames: secret fields are matched by name whatever their case
// and separators, and the names given besides SecretNames; names that
// only look like secrets' (a page token, a count of tokens) are not.
func TestFieldNames(t *testing.T) {
	t.Parallel()
	r := NewFields([]string{"card_number"})
	for _, name := range []string{"password", "Password", "db_password", "passwd", "passphrase", "token", "access_token", "refresh_token",
		"id_token", "idToken", "GITHUB_TOKEN", "X-Auth-Token", "client_secret", "clientSecret", "secret", "apiKey", "api_key", "api-key",
		"x-api-key", "X-API-KEY", "private_key", "privateKey", "ssh-private-key", "aws_secret_access_key", "secret_key", "cookie", "Set-Cookie",
		"credentials", "credential", "authorization", "Proxy-Authorization", "basic_auth", "connection_string", "dsn", "client_assertion",
		"card_number", "cardNumber", "Card-Number"} {
		if !r.secret(name) {
			t.Errorf("%q is not redacted", name)
		}
	}
	for _, name := range []string{"text", "name", "max_tokens", "page_token", "nextPageToken", "token_count", "author", "key", "path", "card", "secretary"} {
		if r.secret(name) {
			t.Errorf("%q is redacted", name)
		}
	}
}
