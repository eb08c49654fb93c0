package testenv

import (
	"testing"
	"time"
)

// Deadline is when a wait for what must happen gives up: a tenth of the
// time left before the test binary's deadline (go test -timeout), so that
// a wait that never ends fails the test with its own message rather than
// the binary's panic; two minutes from now without a deadline. A fixed
// bound is one a loaded machine can outlast. (store/storetest's Bound is
// the same rule as a context, for packages that may not import this one.)
func Deadline(tb testing.TB) time.Time {
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return dl.Add(-time.Until(dl) / 10)
		}
	}
	return time.Now().Add(2 * time.Minute)
}
