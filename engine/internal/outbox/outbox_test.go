package outbox

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

func TestOutboxBoundsPendingBytes(t *testing.T) {
	t.Parallel()
	ev := func(i int) *toolwirev1.ExecuteBatchResponse {
		return &toolwirev1.ExecuteBatchResponse{Event: &toolwirev1.ExecuteBatchResponse_Progress{Progress: &toolwirev1.CallProgress{
			CallId: fmt.Sprint(i), Index: uint32(i)}}}
	}
	var o Outbox
	g := NewBudget(1 << 20)
	o.Init(100, 10, g)
	done := make(chan struct{})
	if !o.Put(done, ev(0), 250, false) {
		t.Fatal("an event over the budget was refused with nothing pending")
	}
	// Now nothing fits until it is sent; later puts wait in order.
	queued := make(chan int, 3)
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if o.Put(done, ev(i), 40, false) {
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
	p, _ := o.Next()
	o.Sent(p) // frees the budget: 1 and 2 fit (80 bytes), 3 does not
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
	if !o.Put(done, ev(4), 1, true) || o.count != 3 {
		t.Errorf("a forced event was not queued at once over the budget")
	}
	o.Close()
	var order []string
	for p, ok := o.Next(); ok; p, ok = o.Next() {
		order = append(order, p.Event.GetProgress().GetCallId())
		o.Sent(p)
	}
	if got := strings.Join(order, " "); got != "1 2 4" {
		t.Errorf("events sent in the order %s, want 1 2 4 (first come, first served)", got)
	}
	if h := g.held.Load(); h != 0 {
		t.Errorf("the budget holds %d bytes once every event is sent or dropped, want 0", h)
	}
}

// waitFor polls cond until it holds, failing the test just before its own
// deadline: what it waits for must happen, and a fixed bound (it was 10s)
// is one a loaded machine can outlast.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := testenv.Deadline(t)
	for ; !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met by the test's deadline")
		}
	}
}

func TestBudgetSignalsTheCrossingOnly(t *testing.T) {
	t.Parallel()
	g := NewBudget(100)
	g.Charge(60)
	select {
	case <-g.Over():
		t.Fatal("signalled under the bound")
	default:
	}
	g.Charge(60) // 120: crosses
	g.Charge(10) // 130: stays over, no new signal
	select {
	case <-g.Over():
	default:
		t.Fatal("no signal when the held bytes passed the bound")
	}
	select {
	case <-g.Over():
		t.Fatal("signalled again while staying over the bound")
	default:
	}
	if !g.OverBudget() || g.Held() != 130 {
		t.Errorf("OverBudget %v, Held %d; want true, 130", g.OverBudget(), g.Held())
	}
	g.Charge(-130)
	if g.OverBudget() || g.Held() != 0 || g.Peak() != 130 {
		t.Errorf("after giving all back: OverBudget %v, Held %d, Peak %d; want false, 0, 130", g.OverBudget(), g.Held(), g.Peak())
	}
	unbounded := NewBudget(-1)
	unbounded.Charge(1 << 40)
	if unbounded.OverBudget() {
		t.Error("a budget without a bound is over it")
	}
}

// Take hands the writer every event queued at once, in order, holding
// their budget until each is Sent, and says when nothing follows them.
func TestTakeTakesWhatIsQueued(t *testing.T) {
	t.Parallel()
	ev := func(i int) *toolwirev1.ExecuteBatchResponse {
		return &toolwirev1.ExecuteBatchResponse{Seq: uint64(i)}
	}
	var o Outbox
	o.Init(1000, 10, nil)
	for i := 1; i <= 3; i++ {
		o.Put(nil, ev(i), 10, false)
	}
	got, open, parked := o.Take(nil, nil)
	if !open || parked || len(got) != 3 {
		t.Fatalf("Take = %d events, open %v; want 3, open", len(got), open)
	}
	for k, p := range got {
		if p.Event.GetSeq() != uint64(k+1) {
			t.Fatalf("Take[%d] is event %d", k, p.Event.GetSeq())
		}
	}
	if o.bytes != 30 || o.count != 3 {
		t.Fatalf("after Take the outbox holds %d bytes in %d events, want 30 in 3 until Sent", o.bytes, o.count)
	}
	for _, p := range got {
		o.Sent(p)
	}
	// An empty outbox: with no wake (a writer that must write before it
	// parks), Take takes nothing and does not park.
	if ps, open, parked := o.Take(nil, nil); len(ps) != 0 || !open || parked {
		t.Fatalf("Take of an empty outbox with no wake = %v, open %v, parked %v; want nothing, open, not parked", ps, open, parked)
	}
	// With one, Take parks the writer, and the next event wakes it, once.
	woken := 0
	wake := func() { woken++ }
	if ps, open, parked := o.Take(nil, wake); len(ps) != 0 || !open || !parked {
		t.Fatalf("Take of an empty outbox = %v, open %v, parked %v; want nothing, open, parked", ps, open, parked)
	}
	o.Put(nil, ev(4), 10, false)
	o.Put(nil, ev(6), 10, false)
	if woken != 1 {
		t.Fatalf("the parked writer was woken %d times by two events, want once", woken)
	}
	if ps, _, _ := o.Take(nil, wake); len(ps) != 2 || ps[0].Event.GetSeq() != 4 {
		t.Fatalf("Take after waking = %v, want events 4 and 6", ps)
	}
	if _, _, parked := o.Take(nil, wake); !parked {
		t.Fatal("Take of an empty outbox again did not park")
	}
	o.Close()
	if woken != 2 {
		t.Fatalf("Close woke the parked writer %d times in all, want 2", woken)
	}
	if ps, open, parked := o.Take(nil, wake); len(ps) != 0 || open || parked {
		t.Fatalf("Take of a closed, empty outbox = %v, open %v, parked %v", ps, open, parked)
	}
	o = Outbox{}
	o.Init(1000, 10, nil)
	o.Put(nil, ev(5), 10, false)
	o.Close()
	got, open, _ = o.Take(got[:0], nil)
	if open || len(got) != 1 || got[0].Event.GetSeq() != 5 {
		t.Fatalf("Take of a closed outbox = %v, open %v; want event 5, closed", got, open)
	}
	if got, open, _ = o.Take(got[:0], nil); open || len(got) != 0 {
		t.Fatalf("Take of a closed, empty outbox = %v, open %v", got, open)
	}
}

// TestHasRoomIsWaitRoomsCondition: HasRoom answers what WaitRoom waits for,
// by bytes and by count, and WaitRoom returns at once when it says yes.
func TestHasRoomIsWaitRoomsCondition(t *testing.T) {
	t.Parallel()
	ev := &toolwirev1.ExecuteBatchResponse{}
	var o Outbox
	o.Init(100, 2, nil)
	never := make(chan struct{})
	if !o.HasRoom() {
		t.Fatal("an empty outbox has no room")
	}
	o.WaitRoom(never) // returns: there is room
	o.Put(never, ev, 60, false)
	if !o.HasRoom() {
		t.Fatal("60 of 100 bytes, 1 of 2 events: no room")
	}
	o.Put(never, ev, 30, false)
	if o.HasRoom() {
		t.Fatal("2 of 2 events queued: room")
	}
	p, _ := o.Next()
	o.Sent(p)
	if !o.HasRoom() {
		t.Fatal("30 of 100 bytes, 1 of 2 events: no room")
	}
	o.Put(never, ev, 80, true) // forced, over the budget
	if o.HasRoom() {
		t.Fatal("110 of 100 bytes queued: room")
	}
}
