package auth_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/auth"
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
