package engine

import (
	"testing"
	"time"

	"github.com/toolwire/toolwire/store/storetest"
)

// waitFor waits for cond to hold, failing the test just before its own
// deadline (storetest.Bound): what it waits for must happen, and a fixed
// bound (it was 10s) is one a loaded machine can outlast.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	ctx, cancel := storetest.Bound(tb)
	defer cancel()
	for !cond() {
		if ctx.Err() != nil {
			tb.Fatal("condition not met by the test's deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
