package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/internal/envref"
	"github.com/toolwire/toolwire/sources/internal/supervise"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config mounts one remote toolwire server.
type Config struct {
	// Name prefixes the remote's tools: its tool "search" is offered as
	// "<name>_search". Letters, digits and "_" only.
	Name string `json:"name"`
	// Target is the remote's address in gRPC's syntax, such as
	// "tools.internal:50051" or "dns:///toolwire.agents:50051".
	Target string `json:"target"`

	// Insecure selects plaintext. By default the connection uses TLS,
	// verified against the system's roots or CAFile.
	Insecure bool `json:"insecure,omitempty"`
	// CAFile is a PEM file of the CAs to verify the remote's certificate
	// with, instead of the system's roots.
	CAFile string `json:"ca_file,omitempty"`
	// ServerName overrides the name the certificate is verified against.
	ServerName string `json:"server_name,omitempty"`
	// CertFile and KeyFile are a client certificate, for remotes that
	// require mutual TLS.
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`

	// Token is sent with every RPC as "authorization: Bearer <token>". It
	// should reference the environment, as in "{{REMOTE_TOKEN}}"; it is read
	// for each RPC and never logged. Over plaintext it is sent only to a
	// loopback target.
	Token string `json:"token,omitempty"`
}

var mountName = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// Validate reports what is wrong with c, naming the mount. It reads no
// files and no environment: those are read when connecting.
func (c Config) Validate() error {
	if !mountName.MatchString(c.Name) {
		return fmt.Errorf("remote %q: name must match [A-Za-z0-9_]{1,64}", c.Name)
	}
	if c.Target == "" {
		return fmt.Errorf("remote %q: target is required", c.Name)
	}
	if c.Insecure && (c.CAFile != "" || c.ServerName != "" || c.CertFile != "" || c.KeyFile != "") {
		return fmt.Errorf("remote %q: insecure (plaintext) conflicts with the TLS settings", c.Name)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("remote %q: cert_file and key_file go together", c.Name)
	}
	if err := envref.Check(c.Token); err != nil {
		return fmt.Errorf("remote %q: token: %w", c.Name, err)
	}
	if c.Token != "" && c.Insecure && !isLoopback(c.Target) {
		return fmt.Errorf("remote %q: a token is sent in plaintext only to a loopback target; use TLS for %s", c.Name, c.Target)
	}
	return nil
}

// ValidateAll validates every mount and checks that names are unique.
func ValidateAll(cfgs []Config) error {
	return supervise.ValidateAll(cfgs, "remote", Config.name)
}

func (c Config) name() string { return c.Name }

// isLoopback reports whether target names this host: localhost, a loopback
// address or a Unix socket.
func isLoopback(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	for _, scheme := range []string{"dns:///", "passthrough:///"} {
		target = strings.TrimPrefix(target, scheme)
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}

// dialOptions returns the client options for c, reading its files.
func (c Config) dialOptions() ([]client.Option, error) {
	var opts []client.Option
	if c.Insecure {
		opts = append(opts, client.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		tc := &tls.Config{ServerName: c.ServerName, MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("ca_file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("ca_file %s: no PEM certificates", c.CAFile)
			}
		}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, client.WithTransportCredentials(credentials.NewTLS(tc)))
	}
	if c.Token != "" {
		opts = append(opts, client.WithPerRPCCredentials(bearer{token: c.Token, secure: !c.Insecure}))
	}
	return opts, nil
}

// bearer sends the token, read from the environment for each RPC.
type bearer struct {
	token  string // may reference {{ENV_VAR}}
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := envref.Expand(b.token)
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is false only for plaintext to a loopback target,
// which Validate has checked.
func (b bearer) RequireTransportSecurity() bool { return b.secure }
