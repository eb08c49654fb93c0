package engine

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
)

func TestOutboxBoundsPendingBytes(t *testing.T) {
	t.Parallel()
	ev := func(i int) *toolwirev1.ExecuteBatchResponse {
		return progressEvent(fmt.Sprint(i), i, tools.Progress{})
	}
	var o outbox
	g := newBudget(1 << 20)
	o.init(100, 10, g)
	done := make(chan struct{})
	if !o.put(done, ev(0), 250, false) {
		t.Fatal("an event over the budget was refused with nothing pending")
	}
	// Now nothing fits until it is sent; later puts wait in order.
	queued := make(chan int, 3)
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if o.put(done, ev(i), 40, false) {
				queued <- i
			}
		}()
		waitFor(t, func() bool { o.mu.Lock(); defer o.mu.Unlock(); return len(o.waiters) == i })
	}
	if o.bytes != 250 || o.count != 1 {
		t.Fatalf("outbox holds %d bytes in %d events, want 250 in 1", o.bytes, o.count)
	}
	// The events waiting to be queued are held too, and count against the
	// engine's budget.
	if h, gh := o.held.Load(), g.held.Load(); h != 370 || gh != 370 {
		t.Fatalf("outbox holds %d bytes of the budget, the budget %d; want 370 (250 queued, 3 × 40 waiting)", h, gh)
	}
	p, _ := o.next()
	o.sent(p) // frees the budget: 1 and 2 fit (80 bytes), 3 does not
	<-queued
	<-queued
	if o.bytes != 80 {
		t.Errorf("outbox holds %d bytes, want 80", o.bytes)
	}
	close(done) // the stream ends: the waiter gives up
	wg.Wait()
	select {
	case i := <-queued:
		t.Errorf("event %d was queued after the stream ended", i)
	default:
	}
	if !o.put(done, ev(4), 1, true) || o.count != 3 {
		t.Errorf("a forced event was not queued at once over the budget")
	}
	o.close()
	var order []string
	for p, ok := o.next(); ok; p, ok = o.next() {
		order = append(order, p.ev.GetProgress().GetCallId())
		o.sent(p)
	}
	if got := strings.Join(order, " "); got != "1 2 4" {
		t.Errorf("events sent in the order %s, want 1 2 4 (first come, first served)", got)
	}
	if h := g.held.Load(); h != 0 {
		t.Errorf("the budget holds %d bytes once every event is sent or dropped, want 0", h)
	}
}
