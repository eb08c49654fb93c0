package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// TestTwoTrials: the command measures a real binary (this tree's) end to
// end, two trials of each kind, and prints a row for each.
func TestTwoTrials(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	testenv.LookPath(t, "redis-server")
	bin := filepath.Join(t.TempDir(), "toolwire")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/toolwire").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--after", bin, "--trials", "2"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, row := range []string{"after    cancel", "after    approve"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q in\n%s", row, out.String())
		}
	}
}
