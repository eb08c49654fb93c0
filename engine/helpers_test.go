package engine

import (
	"testing"
	"time"
)

// waitFor waits up to 10s for cond to hold.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
