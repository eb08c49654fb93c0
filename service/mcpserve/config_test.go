package mcpserve

import (
	"flag"
	"strings"
	"testing"
	"time"
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
	o := c.Options(nil, "v1").withDefaults()
	if o.MaxSessions != 7 || o.MaxSessionsPerCaller != 3 || o.SessionTimeout != 2*time.Minute || o.Version != "v1" {
		t.Errorf("options %+v", o)
	}
	if d := (Config{}).Options(nil, "").withDefaults(); d.MaxSessions != DefaultMaxSessions || d.MaxSessionsPerCaller != DefaultMaxSessionsPerCaller || d.SessionTimeout != DefaultSessionTimeout {
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
