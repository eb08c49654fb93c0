package remote

import (
	"fmt"
	"regexp"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/sources/internal/grpcdial"
	"github.com/toolwire/toolwire/sources/internal/supervise"
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
	return c.settings().Validate(fmt.Sprintf("remote %q", c.Name))
}

// ValidateAll validates every mount and checks that names are unique.
func ValidateAll(cfgs []Config) error {
	return supervise.ValidateAll(cfgs, "remote", Config.name)
}

func (c Config) name() string { return c.Name }

func (c Config) settings() grpcdial.Settings {
	return grpcdial.Settings{Target: c.Target, Insecure: c.Insecure, CAFile: c.CAFile, ServerName: c.ServerName,
		CertFile: c.CertFile, KeyFile: c.KeyFile, Token: c.Token}
}

// dialOptions returns the client options for c, reading its files.
func (c Config) dialOptions() ([]client.Option, error) {
	tc, per, err := c.settings().Credentials()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithTransportCredentials(tc)}
	if per != nil {
		opts = append(opts, client.WithPerRPCCredentials(per))
	}
	return opts, nil
}
