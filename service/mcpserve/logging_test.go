package mcpserve

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
)

// TestSDKLogsAtDebug: a normal call on each revision, and a session's
// whole life, write nothing to a logger at INFO: the go-sdk's lines for
// each request and session go to DEBUG, where they still are.
func TestSDKLogsAtDebug(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			log := &logbuf.Buffer{}
			ts := newTestServer(t, &Options{Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: level}))})
			for _, rev := range revisions {
				cs := connect(t, ts.url, "alice-token", rev, nil)
				if res := call(t, cs, "echo", `{"text":"hi"}`, nil); text(res) != "hi" {
					t.Fatalf("%s: %+v", rev, res)
				}
				if err := cs.Close(); err != nil {
					t.Fatal(err)
				}
			}
			got := log.String()
			switch level {
			case slog.LevelInfo:
				if got != "" {
					t.Errorf("at INFO the log has:\n%s", got)
				}
			default:
				for _, line := range []string{"server session connected", "session initialized", "level=DEBUG"} {
					if !strings.Contains(got, line) {
						t.Errorf("at DEBUG the log lacks %q:\n%s", line, got)
					}
				}
				if strings.Contains(got, "level=INFO") {
					t.Errorf("at DEBUG the log has INFO lines:\n%s", got)
				}
			}
		})
	}
}
