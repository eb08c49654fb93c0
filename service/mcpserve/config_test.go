package mcpserve

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/tools"
)

// TestConfig: the flags set the sessions' bounds, Options carries them to
// the Server, and a negative bound is refused naming its key.
func TestConfig(t *testing.T) {
	t.Parallel()
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse([]string{"--mcp-max-sessions", "7", "--mcp-max-sessions-per-caller", "3", "--mcp-session-idle-timeout", "2m"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	o, err := c.Options(nil, "v1").withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxSessions != 7 || o.MaxSessionsPerCaller != 3 || o.SessionTimeout != 2*time.Minute || o.Version != "v1" {
		t.Errorf("options %+v", o)
	}
	if d, err := (Config{}).Options(nil, "").withDefaults(); err != nil || d.MaxSessions != DefaultMaxSessions || d.MaxSessionsPerCaller != DefaultMaxSessionsPerCaller || d.SessionTimeout != DefaultSessionTimeout {
		t.Errorf("defaults %+v", d)
	}
	for key, bad := range map[string]Config{
		"mcp_max_sessions":            {MaxSessions: -1},
		"mcp_max_sessions_per_caller": {MaxSessionsPerCaller: -1},
		"mcp_session_idle_timeout":    {SessionIdleTimeout: -time.Second},
	} {
		if err := bad.Validate(); err == nil || !strings.HasPrefix(err.Error(), key+":") {
			t.Errorf("%+v: %v, want an error naming %s", bad, err, key)
		}
	}
}

// TestNewRefusesOptionsItCannotUse checks that New says which option it
// cannot use, as every surface's New does, rather than serve with another.
func TestNewRefusesOptionsItCannotUse(t *testing.T) {
	t.Parallel()
	eng := engine.New(engine.Config{}, engine.Deps{})
	t.Cleanup(eng.Close)
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{PageSize: engine.MaxPageSize + 1}, {MaxSessions: -1}, {MaxSessionsPerCaller: -5}} {
		if s, err := New(eng, reg, o); err == nil {
			s.Close()
			t.Errorf("New(%+v) = nil error; want the option named", o)
		}
	}
	s, err := New(eng, reg, Options{MaxSessions: 2})
	if err != nil {
		t.Fatalf("New with a total below the per-caller default: %v", err)
	}
	s.Close()
}
