package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckSessionRoot checks that a read-only path holding the sessions'
// root is refused in required mode and warned about in auto mode, through
// a symlink too, and that paths beside it, or mode off, pass.
func TestCheckSessionRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := filepath.Join(dir, "srv", "sessions")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "srv"), link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		mode          Mode
		ro            []string
		warn, refused bool
	}{
		{"auto, parent", Auto, []string{filepath.Join(dir, "srv")}, true, false},
		{"required, parent", Required, []string{filepath.Join(dir, "srv")}, false, true},
		{"required, the root itself", Required, []string{root}, false, true},
		{"required, through a symlink", Required, []string{link}, false, true},
		{"required, a sibling", Required, []string{filepath.Join(dir, "srv2")}, false, false},
		{"required, below the root", Required, []string{filepath.Join(root, "a")}, false, false},
		{"off, parent", Off, []string{filepath.Join(dir, "srv")}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warning, err := Config{Mode: tt.mode, ReadOnlyPaths: tt.ro}.CheckSessionRoot(root)
			if (err != nil) != tt.refused {
				t.Errorf("err = %v; want refused %v", err, tt.refused)
			}
			if (warning != "") != tt.warn {
				t.Errorf("warning = %q; want one %v", warning, tt.warn)
			}
			for _, msg := range []string{warning, errString(err)} {
				if msg != "" && !strings.Contains(msg, "holds the sessions' folders") {
					t.Errorf("%q does not say why", msg)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
