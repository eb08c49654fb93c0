package connectserve_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// stream, a watcher or a send watchdog the surface left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
