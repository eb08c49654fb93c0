package audit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// trail writes on a goroutine of its own, which Close must end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
