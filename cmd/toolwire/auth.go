package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/toolwire/toolwire/client"
	"google.golang.org/grpc/credentials"
)

// clientSecurity are the TLS and token flags of the client commands.
type clientSecurity struct {
	ca, cert, key   string
	token, tokenEnv string
	useTLS          bool
}

func (c *clientSecurity) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.useTLS, "tls", false, "connect with TLS, trusting the system's CAs (implied by --ca and --cert)")
	fs.StringVar(&c.ca, "ca", "", "PEM CA `file` to trust for the server's certificate (implies TLS)")
	fs.StringVar(&c.cert, "cert", "", "PEM client certificate `file` for mutual TLS (with --key)")
	fs.StringVar(&c.key, "key", "", "PEM private key `file` of --cert")
	fs.StringVar(&c.token, "token", "", "bearer `token` to send (visible to other local users in the process list; prefer --token-env)")
	fs.StringVar(&c.tokenEnv, "token-env", "TOOLWIRE_TOKEN", "environment `variable` holding the bearer token, when --token is not given")
}

// options returns the client options for addr. A token goes over plaintext
// only to a loopback address.
func (c *clientSecurity) options(addr string) ([]client.Option, error) {
	var opts []client.Option
	secure := c.useTLS || c.ca != "" || c.cert != ""
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.ca != "" {
			pem, err := os.ReadFile(c.ca)
			if err != nil {
				return nil, err
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ca %s: no PEM certificate in it", c.ca)
			}
		}
		if (c.cert == "") != (c.key == "") {
			return nil, usageError("--cert and --key go together")
		}
		if c.cert != "" {
			kp, err := tls.LoadX509KeyPair(c.cert, c.key)
			if err != nil {
				return nil, err
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		opts = append(opts, client.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	token := c.token
	if token == "" && c.tokenEnv != "" {
		token = os.Getenv(c.tokenEnv)
	}
	switch {
	case token == "":
	case secure:
		opts = append(opts, client.WithToken(token))
	case isLoopback(addr):
		opts = append(opts, client.WithInsecureToken(token))
	default:
		return nil, usageError("refusing to send a token in plaintext to %s: connect with TLS (--tls or --ca)", addr)
	}
	return opts, nil
}

// isLoopback reports whether addr names this host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
