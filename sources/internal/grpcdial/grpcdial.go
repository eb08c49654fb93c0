// Package grpcdial is how sources that reach gRPC servers (remote toolwire
// mounts, gRPC services by reflection) connect: plaintext or TLS with an
// optional CA, server name and client certificate, and a bearer token read
// from the environment for every RPC, sent in plaintext only to loopback.
// The config keys are the same for every such source (docs/sources.md).
package grpcdial

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/toolwire/toolwire/internal/envref"
	"github.com/toolwire/toolwire/internal/tlsfiles"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Settings are a connection's config keys.
type Settings struct {
	Target     string
	Insecure   bool
	CAFile     string
	ServerName string
	CertFile   string
	KeyFile    string
	Token      string // may reference {{ENV_VAR}}
}

// Validate reports what is wrong with s; it reads no files and no
// environment. what names the configuration, as in `remote "a"`.
func (s Settings) Validate(what string) error {
	if s.Target == "" {
		return fmt.Errorf("%s: target is required", what)
	}
	if s.Insecure && (s.CAFile != "" || s.ServerName != "" || s.CertFile != "" || s.KeyFile != "") {
		return fmt.Errorf("%s: insecure (plaintext) conflicts with the TLS settings", what)
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return fmt.Errorf("%s: cert_file and key_file go together", what)
	}
	if err := envref.CheckSecret(s.Token); err != nil {
		return fmt.Errorf("%s: token: %w", what, err)
	}
	if s.Token != "" && s.Insecure && !IsLoopback(s.Target) {
		return fmt.Errorf("%s: a token is sent in plaintext only to a loopback target; use TLS for %s", what, s.Target)
	}
	return nil
}

// Credentials returns the transport credentials and, with a token, the
// per-RPC credentials (nil without one), reading s's files. The files are
// read again when they change (tlsfiles), so the connections a source
// makes after a rotation of its CA or its client certificate (cert-manager
// renews one long before it expires) use the new ones without a restart.
func (s Settings) Credentials() (credentials.TransportCredentials, credentials.PerRPCCredentials, error) {
	var per credentials.PerRPCCredentials
	if s.Token != "" {
		per = bearer{token: s.Token, secure: !s.Insecure}
	}
	if s.Insecure {
		return insecure.NewCredentials(), per, nil
	}
	tc := &tls.Config{ServerName: s.ServerName, MinVersion: tls.VersionTLS12}
	if s.CAFile != "" {
		cas, err := tlsfiles.LoadCAs(s.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("ca_file: %w", err)
		}
		// gRPC sets the name per connection (server_name, else the
		// target's host), which the check reads from the connection; for
		// an IP address, which crypto/tls sends no name for, it is the
		// same fallback.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = cas.VerifyServer(cmp.Or(s.ServerName, targetHost(s.Target)))
	}
	if s.CertFile != "" {
		kp, err := tlsfiles.Load(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.GetClientCertificate = kp.GetClientCertificate
	}
	return credentials.NewTLS(tc), per, nil
}

// targetHost is the host of a gRPC target (host:port, dns:///host:port,
// passthrough:///host:port), as gRPC names the connection's authority.
func targetHost(target string) string {
	if i := strings.Index(target, ":///"); i >= 0 {
		target = target[i+len(":///"):]
	} else if rest, ok := strings.CutPrefix(target, "dns://"); ok {
		if _, after, ok := strings.Cut(rest, "/"); ok {
			target = after // dns://resolver/host:port
		}
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return target
	}
	return host
}

// IsLoopback reports whether target names this host: localhost, a
// loopback address or a Unix socket.
func IsLoopback(target string) bool {
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
