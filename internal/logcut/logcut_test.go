package logcut_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolwire/toolwire/internal/logcut"
)

func TestString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "/mcp", "/mcp"},
		{"at the bound", strings.Repeat("a", logcut.MaxBytes), strings.Repeat("a", logcut.MaxBytes)},
		{"past it", strings.Repeat("a", 60000), strings.Repeat("a", logcut.MaxBytes) + "… (60000 bytes)"},
		// 'é' is two bytes: the bound falls inside the 128th, which is left out whole.
		{"a rune cut in two", "x" + strings.Repeat("é", 200), "x" + strings.Repeat("é", 127) + "… (401 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := logcut.String(tc.in)
			if got != tc.want {
				t.Errorf("String(%d bytes) = %.80q… (%d bytes); want %.80q… (%d bytes)", len(tc.in), got, len(got), tc.want, len(tc.want))
			}
			if utf8.ValidString(tc.in) && !utf8.ValidString(got) {
				t.Errorf("String(%d bytes of UTF-8) is not UTF-8", len(tc.in))
			}
		})
	}
}
