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

// testDeadline closes just before the test's own deadline (storetest.Bound): the
// bound of a select waiting for what must happen, where a fixed one (10s,
// 5s) is a bet a loaded machine can lose.
func testDeadline(tb testing.TB) <-chan struct{} {
	ctx, cancel := storetest.Bound(tb)
	tb.Cleanup(cancel)
	return ctx.Done()
}
