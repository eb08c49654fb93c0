package logging_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/logging"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  logging.Config
		want string // "" means valid
	}{
		{logging.DefaultConfig(), ""},
		{logging.Config{Level: "debug", Format: "json"}, ""},
		{logging.Config{Level: "ERROR", Format: "text"}, ""},
		{logging.Config{Level: "loud"}, `log level "loud": want debug, info, warn or error`},
		{logging.Config{Level: ""}, `log level "": want debug, info, warn or error`},
		{logging.Config{Level: "info", Format: "xml"}, `log format "xml": want text or json`},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: Validate() = %v, want nil", tt.cfg, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("%+v: Validate() = %v, want %q", tt.cfg, err, tt.want)
		}
		if _, err := tt.cfg.Handler(&bytes.Buffer{}); (err == nil) != (tt.want == "") {
			t.Errorf("%+v: Handler error %v, want one only when Validate fails", tt.cfg, err)
		}
	}
}

func TestHandlerLevel(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h, err := logging.Config{Level: "warn", Format: "json"}.Handler(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(h)
	log.Info("hidden")
	log.Warn("shown", "after", 2*time.Second)
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `"after":"2s"`) {
		t.Errorf("log at warn, JSON: %s", got)
	}
}
