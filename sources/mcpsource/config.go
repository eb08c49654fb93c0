package mcpsource

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/toolwire/toolwire/internal/envref"
	"github.com/toolwire/toolwire/sources/internal/supervise"
)

// ServerConfig describes one MCP server. Exactly one of Command (a child
// process spoken to over stdio) and URL (streamable HTTP) is set.
type ServerConfig struct {
	// Name prefixes the server's tools: its tool "search" is offered as
	// "<name>_search". Letters, digits and "_" only.
	Name string `json:"name"`

	// Command and Args start a stdio server. The child inherits toolwire's
	// environment plus Env, whose values may reference {{ENV_VAR}}.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`

	// URL is a streamable HTTP endpoint; Headers are sent with every
	// request, and their values may reference {{ENV_VAR}}.
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`

	// ReconnectTimeout bounds how long a streamable HTTP server may leave
	// the gateway without an answer when a stream is reopened or has
	// broken (see resume.go): past it, or at once when the server refuses
	// the connection, the session is given up and its calls in flight fail.
	// Zero means 2s.
	ReconnectTimeout time.Duration `json:"reconnect_timeout,omitempty"`

	// PingTimeout bounds how long a stdio server may leave a ping
	// unanswered, sent once a call has ended without its answer, or a
	// message begun unread once its call has ended, before its process is
	// restarted (see alive.go, process.write). Zero means 10s.
	PingTimeout time.Duration `json:"ping_timeout,omitempty"`

	// OAuth signs in to a streamable HTTP server that requires it, with
	// the client credentials grant (see oauth.go).
	OAuth *OAuthConfig `json:"oauth,omitempty"`
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// maxReconnectTimeout caps ReconnectTimeout: a server that needs longer to
// answer a ping is as good as gone to a caller waiting for its result.
const maxReconnectTimeout = time.Minute

// Validate reports what is wrong with c, naming the server. It does not read
// the environment: variables are read when connecting.
func (c ServerConfig) Validate() error {
	if !serverName.MatchString(c.Name) {
		return fmt.Errorf("mcp server %q: name must match [A-Za-z0-9_]{1,64}", c.Name)
	}
	switch {
	case c.Command == "" && c.URL == "":
		return fmt.Errorf("mcp server %q: set command (stdio) or url (streamable HTTP)", c.Name)
	case c.Command != "" && c.URL != "":
		return fmt.Errorf("mcp server %q: set command or url, not both", c.Name)
	case c.URL != "":
		if c.ReconnectTimeout < 0 || c.ReconnectTimeout > maxReconnectTimeout {
			return fmt.Errorf("mcp server %q: reconnect_timeout %v: want from 0 (the default, %v) to %v", c.Name, c.ReconnectTimeout, defaultReconnectTimeout, maxReconnectTimeout)
		}
		if len(c.Args) > 0 || len(c.Env) > 0 {
			return fmt.Errorf("mcp server %q: args and env are for stdio servers (command)", c.Name)
		}
		if c.PingTimeout != 0 {
			return fmt.Errorf("mcp server %q: ping_timeout is for stdio servers (command); a streamable HTTP server's pings wait reconnect_timeout", c.Name)
		}
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("mcp server %q: url must be an absolute http or https URL", c.Name)
		}
	case len(c.Headers) > 0:
		return fmt.Errorf("mcp server %q: headers are for streamable HTTP servers (url)", c.Name)
	case c.OAuth != nil:
		return fmt.Errorf("mcp server %q: oauth is for streamable HTTP servers (url)", c.Name)
	case c.ReconnectTimeout != 0:
		return fmt.Errorf("mcp server %q: reconnect_timeout is for streamable HTTP servers (url)", c.Name)
	case c.PingTimeout < 0 || c.PingTimeout > maxPingTimeout:
		return fmt.Errorf("mcp server %q: ping_timeout %v: want from 0 (the default, %v) to %v", c.Name, c.PingTimeout, defaultPingTimeout, maxPingTimeout)
	}
	for k, v := range c.Env {
		if err := envref.Check(v); err != nil {
			return fmt.Errorf("mcp server %q: env %s: %w", c.Name, k, err)
		}
	}
	for k, v := range c.Headers {
		if err := envref.CheckSecret(v); err != nil {
			return fmt.Errorf("mcp server %q: header %s: %w", c.Name, k, err)
		}
		if c.OAuth != nil && http.CanonicalHeaderKey(k) == "Authorization" {
			return fmt.Errorf("mcp server %q: an Authorization header conflicts with oauth, which sends its own", c.Name)
		}
	}
	if c.OAuth != nil {
		if err := c.OAuth.validate(); err != nil {
			return fmt.Errorf("mcp server %q: oauth: %w", c.Name, err)
		}
	}
	return nil
}

// ValidateAll validates every server and checks that names are unique.
func ValidateAll(cfgs []ServerConfig) error {
	return supervise.ValidateAll(cfgs, "mcp server", ServerConfig.name)
}

func (c ServerConfig) name() string { return c.Name }

func (c ServerConfig) equal(o ServerConfig) bool {
	return c.Name == o.Name && c.Command == o.Command && slices.Equal(c.Args, o.Args) &&
		maps.Equal(c.Env, o.Env) && c.URL == o.URL && maps.Equal(c.Headers, o.Headers) &&
		c.ReconnectTimeout == o.ReconnectTimeout && c.PingTimeout == o.PingTimeout && c.OAuth.equal(o.OAuth)
}
