package auth_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/internal/follow"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/internal/testing/testoidc"
	"github.com/toolwire/toolwire/policy"
)

func TestServerConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  auth.ServerConfig
		want string // "" means valid
	}{
		{"zero value: plaintext, no authentication", auth.ServerConfig{}, ""},
		{"TLS", auth.ServerConfig{TLSCert: "c.pem", TLSKey: "k.pem"}, ""},
		{"mutual TLS", auth.ServerConfig{TLSCert: "c.pem", TLSKey: "k.pem", ClientCA: "ca.pem"}, ""},
		{"permissions", auth.ServerConfig{Auth: auth.CallerConfig{Permissions: policy.Permissions{"ci": {Allow: []string{"fs.*"}}}}}, ""},
		{"cert without key", auth.ServerConfig{TLSCert: "c.pem"}, "--tls-cert and --tls-key go together"},
		{"key without cert", auth.ServerConfig{TLSKey: "k.pem"}, "--tls-cert and --tls-key go together"},
		{"client CA without TLS", auth.ServerConfig{ClientCA: "ca.pem"}, "--client-ca needs --tls-cert and --tls-key"},
		{"bad pattern", auth.ServerConfig{Auth: auth.CallerConfig{Permissions: policy.Permissions{"a": {Allow: []string{"["}}}}}, "auth.permissions: "},
		{"groups", auth.ServerConfig{Auth: auth.CallerConfig{Groups: map[string][]string{"ci": {"agents"}}}}, ""},
		{"empty group", auth.ServerConfig{Auth: auth.CallerConfig{Groups: map[string][]string{"ci": {""}}}}, `auth.groups: caller "ci" has an empty group`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestServerConfigVerifierReadsEveryTokenSource(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("bob: "+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := auth.ServerConfig{Auth: auth.CallerConfig{
		TokensFile: file,
		Tokens:     []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}},
	}}
	var logs strings.Builder
	v, err := cfg.Verifier(slog.New(slog.NewTextHandler(&logs, nil)), func(k string) string {
		if k == auth.TokensEnv {
			return "{carol: carol-token-0123456789abcdef}"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{aliceToken: "alice", bobToken: "bob", "carol-token-0123456789abcdef": "carol"} {
		if got, err := v.Verify(context.Background(), auth.Credentials{Authorization: []string{"Bearer " + token}}); err != nil || got.ID != want {
			t.Errorf("token of %s: %+v, %v", want, got, err)
		}
	}
	for _, want := range []string{"authentication on", "tokens=3", "over plaintext"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}

// TestTokensFileIsReadAgain: the tokens file is read again when it
// changes, so removing a token revokes it and adding one grants it without
// a restart, beside the tokens of the config and the environment; a change
// that does not parse, or the file's removal, keeps the tokens it held
// before and is logged; a file that is bad at the start stops the server.
func TestTokensFileIsReadAgain(t *testing.T) {
	t.Cleanup(follow.SetRecheck(0))
	file := filepath.Join(t.TempDir(), "tokens")
	mod := time.Now()
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		mod = mod.Add(time.Minute)
		if err := os.Chtimes(file, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	write("bob: " + bobToken + "\n")
	var logs logbuf.Buffer
	cfg := auth.ServerConfig{Auth: auth.CallerConfig{TokensFile: file, Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}}}
	v, err := cfg.Verifier(slog.New(slog.NewTextHandler(&logs, nil)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	const carolToken = "carol-token-0123456789abcdef"
	caller := func(token string) string {
		t.Helper()
		id, err := v.Verify(context.Background(), auth.Credentials{Authorization: []string{"Bearer " + token}})
		if err != nil {
			return err.Error()
		}
		return id.ID
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		for token, id := range want {
			if got := caller(token); got != id {
				t.Errorf("%s: the token of %s is %q, want %q", when, id, got, id)
			}
		}
	}
	check("at the start", map[string]string{aliceToken: "alice", bobToken: "bob", carolToken: "invalid bearer token"})

	write("carol: " + carolToken + "\n")
	check("bob's token removed, carol's added", map[string]string{aliceToken: "alice", bobToken: "invalid bearer token", carolToken: "carol"})
	if !strings.Contains(logs.String(), "the tokens file changed: its tokens are in force") {
		t.Errorf("no log of the change:\n%s", logs.String())
	}

	for what, content := range map[string]string{
		"a file that does not parse": "carol: [",
		"a token too short":          "carol: short\n",
		"the config's token again":   "dave: " + aliceToken + "\n",
	} {
		write(content)
		check(what, map[string]string{aliceToken: "alice", bobToken: "invalid bearer token", carolToken: "carol"})
	}
	if !strings.Contains(logs.String(), "the tokens file changed but cannot be read; the tokens it held before stay in force") {
		t.Errorf("no log of the bad change:\n%s", logs.String())
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	check("the file removed", map[string]string{carolToken: "carol"})

	// A tokens file that holds no token keeps authentication on.
	empty := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var emptyLogs logbuf.Buffer
	ev, err := auth.ServerConfig{Auth: auth.CallerConfig{TokensFile: empty}}.Verifier(slog.New(slog.NewTextHandler(&emptyLogs, nil)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(emptyLogs.String(), "the tokens file holds no token") {
		t.Errorf("no warning of an empty tokens file:\n%s", emptyLogs.String())
	}
	if !ev.Enabled() {
		t.Error("an empty tokens file turned authentication off")
	}
	if id, err := ev.Verify(context.Background(), auth.Credentials{}); err == nil {
		t.Errorf("no credentials with an empty tokens file: %+v, want refused", id)
	}

	for what, content := range map[string]string{"missing": "", "not parsing": "bob: ["} {
		bad := filepath.Join(t.TempDir(), "tokens")
		if content != "" {
			if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cfg := auth.ServerConfig{Auth: auth.CallerConfig{TokensFile: bad}}
		if _, err := cfg.Verifier(discard, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "auth.tokens_file") {
			t.Errorf("a tokens file %s at the start: %v, want an error naming auth.tokens_file", what, err)
		}
	}
}

// TestTokensAddedBesideUnprefixedJWTs: a tokens file empty at the start
// beside JWTs without a caller prefix (the Helm chart's OIDC example) is
// fine; tokens added to it later are refused, as they would have been at
// the start (their names could be JWT callers'), and the log says what to
// set.
func TestTokensAddedBesideUnprefixedJWTs(t *testing.T) {
	t.Cleanup(follow.SetRecheck(0))
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	v, err := auth.New(auth.Config{TokensFile: file, OIDC: &auth.OIDCConfig{Issuer: "https://issuer.example", Audience: "toolwire"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("an empty tokens file beside unprefixed JWTs: %v", err)
	}
	if err := os.WriteFile(file, []byte("alice: "+aliceToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(file, later, later); err != nil {
		t.Fatal(err)
	}
	if id, err := v.Verify(context.Background(), auth.Credentials{Authorization: []string{"Bearer " + aliceToken}}); err == nil {
		t.Errorf("a token added beside unprefixed JWTs: accepted as %+v", id)
	}
	if !strings.Contains(logs.String(), "auth.oidc.caller_prefix") {
		t.Errorf("the log does not say what to set:\n%s", logs.String())
	}
	// At the start the same file is refused, as before.
	if _, err := auth.New(auth.Config{TokensFile: file, OIDC: &auth.OIDCConfig{Issuer: "https://issuer.example", Audience: "toolwire"}}); err == nil || !strings.Contains(err.Error(), "caller_prefix") {
		t.Errorf("tokens beside unprefixed JWTs at the start: %v, want the prefix asked for", err)
	}
}

// TestOIDCGroupsPrefix: the groups an issuer's tokens name are the
// configuration's groups as they are unless groups_prefix says otherwise,
// so a JWT in the issuer's group "admin" is an administrator of the
// server view; the server warns of it at start, unless groups_prefix is
// set, or is "-" (none, on purpose).
func TestOIDCGroupsPrefix(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	token := iss.Token(t, "rsa-1", testoidc.Claims{"sub": "mallory", "aud": "toolwire", "groups": []string{"admin"}})
	for _, c := range []struct {
		prefix string
		warn   bool
		group  string
	}{
		{"", true, "admin"},
		{"-", false, "admin"},
		{"idp:", false, "idp:admin"},
	} {
		var logs logbuf.Buffer
		cfg := auth.ServerConfig{Auth: auth.CallerConfig{OIDC: &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire", GroupsPrefix: c.prefix}}}
		v, err := cfg.Verifier(slog.New(slog.NewTextHandler(&logs, nil)), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(logs.String(), "auth.oidc.groups_prefix is unset"); warned != c.warn {
			t.Errorf("groups_prefix %q: warned %v; want %v:\n%s", c.prefix, warned, c.warn, logs.String())
		}
		id, err := v.Verify(context.Background(), auth.Credentials{Authorization: []string{"Bearer " + token}})
		if err != nil || !slices.Equal(id.Groups, []string{c.group}) {
			t.Errorf("groups_prefix %q: %+v, %v; want the group %q", c.prefix, id, err, c.group)
		}
	}
}
