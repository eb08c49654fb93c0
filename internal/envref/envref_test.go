package envref

import (
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TOKEN": "s3cret", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{"plain", "abc", "abc", ""},
		{"one", "Bearer {{TOKEN}}", "Bearer s3cret", ""},
		{"spaces", "{{ TOKEN }}", "s3cret", ""},
		{"empty value", "x{{EMPTY}}y", "xy", ""},
		{"unset", "{{NOPE}}", "", "environment variable NOPE is not set"},
		{"bad name", "{{1X}}", "", `bad environment variable name "1X"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := expand(tc.in, lookup)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("expand(%q) error %v, want %q", tc.in, err, tc.err)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("error leaks a value: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
	if err := Check("{{A_B}} {{ok}}"); err != nil {
		t.Errorf("Check: %v", err)
	}
	if err := Check("{{a-b}}"); err == nil {
		t.Error("Check accepted {{a-b}}")
	}
}

// TestCheckSecret: a single-braced {NAME} in a secret's value is a
// reference mistyped, which was sent as written.
func TestCheckSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"Bearer {{TOKEN}}", ""},
		{"{{ TOKEN }}", ""},
		{"plain-value", ""},
		{`{"json": 1}`, ""},
		{"Bearer {TOKEN}", "{TOKEN} would be sent as it is written; an environment variable is written {{TOKEN}}"},
		{"{{A}}-{B}", "{B} would be sent as it is written; an environment variable is written {{B}}"},
		{"{{1BAD}}", `bad environment variable name "1BAD" in {{...}}`},
	} {
		err := CheckSecret(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckSecret(%q) = %v; want nil", tc.in, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("CheckSecret(%q) = %v; want %q", tc.in, err, tc.want)
		}
	}
}
