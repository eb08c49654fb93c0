package redact_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, want string }{
		{"https://api.example.com/openapi.json", "https://api.example.com/openapi.json"},
		{"https://user:s3cret@api.example.com/openapi.json", "https://xxxxx@api.example.com/openapi.json"},
		{"redis://:s3cret@[::1/0", "redis://xxxxx@[::1/0"},                            // does not parse
		{"https://user:s3/cr@t@api.example.com/x", "https://xxxxx@api.example.com/x"}, // "/" and "@" unescaped
		{"https://ghp_0123456789@api.example.com", "https://xxxxx@api.example.com"},   // a token as the name
		{"https://api.example.com/users/@me?q=a@b", "https://xxxxx@b"},                // an "@" further on: more is hidden, never less
		{"not a url", "not a url"},
		{"", ""},
	} {
		if got := redact.URL(tc.raw); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://:s3cret@[::1/0",
		"https://user:s3cret@h:port/x",
		"https://user:s3\"cret@h:port/x", // %q escapes the quote
		"https://user:s3cr/et@h:1/x",     // url.Parse quotes ":s3cr" as the port
		"https://s3cret:@h:port/x",
	} {
		_, perr := url.Parse(raw)
		if perr == nil {
			t.Fatalf("url.Parse(%q) succeeded; the test wants its error", raw)
		}
		for _, err := range []error{perr, fmt.Errorf("store %q: %w", raw, perr), fmt.Errorf("GET %s: HTTP 404", raw)} {
			got := redact.Error(err, raw)
			if msg := got.Error(); strings.Contains(msg, "s3c") || !strings.Contains(msg, redact.Mask) {
				t.Errorf("Error(%q) = %q: want the user information masked", err, msg)
			}
			if err == perr {
				if _, ok := errors.AsType[*url.Error](got); !ok {
					t.Errorf("Error(%v) lost its chain", err)
				}
			}
		}
	}
	plain := fs.ErrNotExist
	if got := redact.Error(plain, "https://u:p@h/x"); got != plain {
		t.Errorf("Error of a message without the URL = %v, want the error itself", got)
	}
	if got := redact.Error(plain, "https://h/x"); got != plain {
		t.Errorf("Error for a URL without user information = %v, want the error itself", got)
	}
	if redact.Error(nil, "https://u:p@h/x") != nil {
		t.Error("Error(nil) is not nil")
	}
}
