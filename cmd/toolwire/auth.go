package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/service"
	"github.com/toolwire/toolwire/service/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// tokensEnv names the environment variable "toolwire serve" reads tokens
// from, in the format of a tokens file.
const tokensEnv = "TOOLWIRE_TOKENS"

// SecurityConfig (exported for go-cmp in tests; this is package main) is the part of serveConfig about TLS, authentication,
// permissions and limits.
type SecurityConfig struct {
	TLSCert  string     `json:"tls_cert"`  // PEM certificate: serve TLS
	TLSKey   string     `json:"tls_key"`   // its PEM key
	ClientCA string     `json:"client_ca"` // PEM CA certificates: accept client certificates they sign
	Auth     authConfig `json:"auth"`

	MaxConcurrentCalls    int           `json:"max_concurrent_calls"`
	MaxQueueWait          time.Duration `json:"max_queue_wait"`
	MaxCallsPerCaller     int           `json:"max_calls_per_caller"`
	MaxMessageBytes       int           `json:"max_message_bytes"`
	MaxConnectionAge      time.Duration `json:"max_connection_age"`
	MaxConnectionAgeGrace time.Duration `json:"max_connection_age_grace"`
	KeepaliveMinTime      time.Duration `json:"keepalive_min_time"`
	KeepaliveTime         time.Duration `json:"keepalive_time"`
	KeepaliveTimeout      time.Duration `json:"keepalive_timeout"`
}

// authConfig is the "auth" section of the configuration.
type authConfig struct {
	TokensFile  string       `json:"tokens_file"` // "name: token" lines, in the clear
	Tokens      []auth.Token `json:"tokens"`      // name and "sha256:<hex>" hash
	Permissions auth.Policy  `json:"permissions"` // per caller name ("*": everyone else)
}

func (c *SecurityConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate `file`: serve TLS (with --tls-key)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key `file` of --tls-cert")
	fs.StringVar(&c.ClientCA, "client-ca", c.ClientCA, "PEM CA `file`: authenticate callers by client certificates it signs (mutual TLS; needs --tls-cert)")
	fs.StringVar(&c.Auth.TokensFile, "tokens-file", c.Auth.TokensFile, "`file` of bearer tokens, one \"name: token\" a line")
	fs.IntVar(&c.MaxConcurrentCalls, "max-concurrent-calls", c.MaxConcurrentCalls, "most tool calls running at once; more queue (0: 4096)")
	fs.DurationVar(&c.MaxQueueWait, "max-queue-wait", c.MaxQueueWait, "how long a batch waits for a free call slot before RESOURCE_EXHAUSTED (0: 5s)")
	fs.IntVar(&c.MaxCallsPerCaller, "max-calls-per-caller", c.MaxCallsPerCaller, "most tool calls of one caller running at once (0: a quarter of --max-concurrent-calls for each authenticated caller; -1: no cap)")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest gRPC message received or sent, in bytes (0: 4 MiB)")
	fs.DurationVar(&c.MaxConnectionAge, "max-connection-age", c.MaxConnectionAge, "close connections after about this long so clients rebalance (0: never)")
}

// limits returns the server's limits.
func (c SecurityConfig) limits() service.Limits {
	return service.Limits{
		MaxConcurrentCalls:    c.MaxConcurrentCalls,
		MaxQueueWait:          c.MaxQueueWait,
		MaxCallsPerCaller:     c.MaxCallsPerCaller,
		MaxMessageBytes:       c.MaxMessageBytes,
		MaxConnectionAge:      c.MaxConnectionAge,
		MaxConnectionAgeGrace: c.MaxConnectionAgeGrace,
		KeepaliveMinTime:      c.KeepaliveMinTime,
		KeepaliveTime:         c.KeepaliveTime,
		KeepaliveTimeout:      c.KeepaliveTimeout,
	}
}

// permissions returns the tool permissions, nil when none are configured.
func (c SecurityConfig) permissions() service.Permissions {
	if len(c.Auth.Permissions) == 0 {
		return nil
	}
	return c.Auth.Permissions
}

// security checks the TLS and authentication settings and returns the
// server options that apply them. getenv reads TOOLWIRE_TOKENS.
func (c SecurityConfig) security(log *slog.Logger, getenv func(string) string) ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case c.ClientCA != "" && c.TLSCert == "":
		return nil, errors.New("--client-ca needs --tls-cert and --tls-key: client certificates are part of TLS")
	case c.TLSCert != "":
		creds, err := auth.ServerCredentials(c.TLSCert, c.TLSKey, c.ClientCA)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(creds))
	}

	tokens := append([]auth.Token(nil), c.Auth.Tokens...)
	if c.Auth.TokensFile != "" {
		b, err := os.ReadFile(c.Auth.TokensFile)
		if err != nil {
			return nil, err
		}
		more, err := auth.ParseTokens(b)
		if err != nil {
			return nil, fmt.Errorf("tokens file %s: %w", c.Auth.TokensFile, err)
		}
		tokens = append(tokens, more...)
	}
	if env := getenv(tokensEnv); env != "" {
		more, err := auth.ParseTokens([]byte(env))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tokensEnv, err)
		}
		tokens = append(tokens, more...)
	}
	a, err := auth.New(auth.Config{Tokens: tokens, ClientCertificates: c.ClientCA != "", Logger: log})
	if err != nil {
		return nil, fmt.Errorf("auth.tokens: %w", err)
	}
	if err := c.Auth.Permissions.Validate(); err != nil {
		return nil, fmt.Errorf("auth.permissions: %w", err)
	}

	switch {
	case a.Enabled():
		opts = append(opts, a.ServerOptions()...)
		if c.TLSCert == "" {
			log.Warn("bearer tokens are accepted over plaintext: anyone who can read the traffic can read them; serve TLS (--tls-cert, --tls-key) unless a mesh encrypts it")
		}
		log.Info("authentication on", "tokens", len(tokens), "client_certificates", c.ClientCA != "")
	case len(c.Auth.Permissions) > 0:
		log.Warn(`permissions are configured but authentication is off: every caller is the anonymous caller "", to which the "" or "*" entry applies`)
	}
	return opts, nil
}

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
