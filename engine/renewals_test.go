package engine

import (
	"context"
	"testing"
	"time"

	"github.com/toolwire/toolwire/store/memory"
)

// countingRenewals is a memory store that reports each renewal call it
// serves, with how many logs it renewed.
type countingRenewals struct {
	*memory.Store
	calls chan int
}

func (c *countingRenewals) RenewLog(ctx context.Context, name, owner string, lease time.Duration) error {
	c.calls <- 1
	return c.Store.RenewLog(ctx, name, owner, lease)
}

func (c *countingRenewals) RenewLogs(ctx context.Context, owner string, lease time.Duration, names ...string) ([]error, error) {
	c.calls <- len(names)
	return c.Store.RenewLogs(ctx, owner, lease, names...)
}

// The leases of a replica's detached batches are renewed together, one
// store call a tick for all of them: a timer of each batch's own made one
// call a batch a tick, 20,000 a second for 10,000 batches held for
// approval, more than a Redis client's pool serves and more write
// transactions than bolt could sync (5,100 batches held after two
// minutes).
func TestOneRenewalPerTickForAllBatches(t *testing.T) {
	m := memory.New(memory.Options{})
	c := &countingRenewals{Store: m, calls: make(chan int, 1024)}
	te := newTestBedWith(t, Config{Approvers: []string{"alice"}, BatchLease: 3 * time.Second},
		Deps{Admission: holdWrites, Idempotency: m, Vars: m, EventLog: c})
	snap := te.reg.Snapshot()
	const n = 50
	holdDetached(t, te, snap, n)
	// From here on every batch is held: renew each three times.
	for len(c.calls) > 0 {
		<-c.calls
	}
	calls, renewed := 0, 0
	for renewed < 3*n {
		select {
		case k := <-c.calls:
			calls++
			renewed += k
		case <-testDeadline(t):
			t.Fatalf("%d leases renewed in %d calls by the test's deadline; want %d", renewed, calls, 3*n)
		}
	}
	if calls > 4 {
		t.Errorf("%d held batches' leases renewed %d times in %d store calls; want one call a tick for all", n, renewed, calls)
	}
}
