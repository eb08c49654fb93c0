package console

import (
	"os/exec"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// TestModules runs the page's pure JavaScript modules' tests
// (testdata/modules.test.mjs: the schema validator and the Connect stream's
// frame decoder) under Node's test runner.
func TestModules(t *testing.T) {
	t.Parallel()
	node := testenv.LookPath(t, "node")
	out, err := exec.Command(node, "--test", "testdata/modules.test.mjs").CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
}
