package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: the
// engine starts goroutines for batches, lanes, leases and the send
// watchdog, and each must end with what started it (or with Close).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
