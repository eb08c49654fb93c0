// Package grpcdial is how sources that reach gRPC servers (remote toolwire
// mounts, gRPC services by reflection) connect: plaintext or TLS with an
// optional CA, server name and client certificate, and a bearer token read
// from the environment for every RPC, sent in plaintext only to loopback.
// The config keys are the same for every such source (docs/sources.md).
package grpcdial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/toolwire/toolwire/internal/envref"
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
	if err := envref.Check(s.Token); err != nil {
		return fmt.Errorf("%s: token: %w", what, err)
	}
	if s.Token != "" && s.Insecure && !IsLoopback(s.Target) {
		return fmt.Errorf("%s: a token is sent in plaintext only to a loopback target; use TLS for %s", what, s.Target)
	}
	return nil
}

// Credentials returns the transport credentials and, with a token, the
// per-RPC credentials (nil without one), reading s's files.
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
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("ca_file %s: no PEM certificates", s.CAFile)
		}
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(tc), per, nil
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
