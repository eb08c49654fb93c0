package sandbox

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: a spare
// still starting, a supervisor's exit still awaited, a context watch left.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
