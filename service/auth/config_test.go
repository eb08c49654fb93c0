package auth_test

import (
	"strings"
	"testing"

	"github.com/toolwire/toolwire/service/auth"
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
		{"permissions", auth.ServerConfig{Auth: auth.CallerConfig{Permissions: auth.Policy{"ci": {Allow: []string{"fs.*"}}}}}, ""},
		{"cert without key", auth.ServerConfig{TLSCert: "c.pem"}, "--tls-cert and --tls-key go together"},
		{"key without cert", auth.ServerConfig{TLSKey: "k.pem"}, "--tls-cert and --tls-key go together"},
		{"client CA without TLS", auth.ServerConfig{ClientCA: "ca.pem"}, "--client-ca needs --tls-cert and --tls-key"},
		{"bad pattern", auth.ServerConfig{Auth: auth.CallerConfig{Permissions: auth.Policy{"a": {Allow: []string{"["}}}}}, "auth.permissions: "},
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
