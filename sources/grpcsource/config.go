package grpcsource

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/toolwire/toolwire/sources/internal/grpcdial"
	"github.com/toolwire/toolwire/sources/internal/supervise"
)

// Config is one gRPC server whose services become tools: an entry of the
// config file's grpc_services: list. The connection keys are the same as
// remotes: has.
type Config struct {
	// Name prefixes the tools: method Check of service grpc.health.v1.Health
	// is offered as "<name>_Health_Check". Letters, digits and "_" only.
	Name string `json:"name"`
	// Target is the server's address in gRPC's syntax.
	Target string `json:"target"`

	// Insecure selects plaintext; by default TLS, verified against the
	// system's roots or CAFile.
	Insecure   bool   `json:"insecure,omitempty"`
	CAFile     string `json:"ca_file,omitempty"`
	ServerName string `json:"server_name,omitempty"`
	CertFile   string `json:"cert_file,omitempty"`
	KeyFile    string `json:"key_file,omitempty"`
	// Token is sent with every RPC as "authorization: Bearer <token>"; it
	// should reference the environment ("{{TOKEN}}").
	Token string `json:"token,omitempty"`

	// Include and Exclude select methods by patterns (glob.go) matched
	// against each method's full name ("grpc.health.v1.Health/Check") and
	// its service's ("grpc.health.v1.Health"): "grpc.health.v1.Health",
	// "grpc.health.v1.Health/*", "**/List*", "google.api.expr.**". None
	// included means all, and Exclude wins. A pattern that matches nothing
	// the server offers is logged.
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`

	// StreamWindow, when positive, is how long a call of a
	// server-streaming method listens at most (its tool's timeout): then
	// it returns the messages that arrived. 0: the call's own deadline.
	StreamWindow time.Duration `json:"stream_window,omitempty"`
}

var entryName = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

func (c Config) what() string { return fmt.Sprintf("grpc service %q", c.Name) }

func (c Config) settings() grpcdial.Settings {
	return grpcdial.Settings{Target: c.Target, Insecure: c.Insecure, CAFile: c.CAFile, ServerName: c.ServerName,
		CertFile: c.CertFile, KeyFile: c.KeyFile, Token: c.Token}
}

// Validate reports what is wrong with c; it reads no files and no
// environment.
func (c Config) Validate() error {
	if !entryName.MatchString(c.Name) {
		return fmt.Errorf("%s: name must match [A-Za-z0-9_]{1,64}", c.what())
	}
	if err := c.settings().Validate(c.what()); err != nil {
		return err
	}
	for _, p := range append(slices.Clone(c.Include), c.Exclude...) {
		if _, err := compileGlob(p); err != nil {
			return fmt.Errorf("%s: pattern %q is not a valid glob: %v", c.what(), p, err)
		}
	}
	if c.StreamWindow < 0 {
		return fmt.Errorf("%s: stream_window %s: want 0 (the call's deadline) or more", c.what(), c.StreamWindow)
	}
	return nil
}

// ValidateAll validates every entry and checks that names are unique.
func ValidateAll(cfgs []Config) error {
	return supervise.ValidateAll(cfgs, "grpc service", func(c Config) string { return c.Name })
}

func (c Config) equal(o Config) bool {
	return c.Name == o.Name && c.settings() == o.settings() && slices.Equal(c.Include, o.Include) && slices.Equal(c.Exclude, o.Exclude) &&
		c.StreamWindow == o.StreamWindow
}
