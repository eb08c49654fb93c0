package record

import "testing"

// TestWaitersShared: a key's channel stays while anyone waits on it, so
// one waiter's leaving does not make another miss its wake-up.
func TestWaitersShared(t *testing.T) {
	var w Waiters
	a, doneA := w.Chan("k")
	b, doneB := w.Chan("k")
	doneA()
	if w.Len() != 1 {
		t.Fatalf("one of two waiters left: %d keys kept, want 1", w.Len())
	}
	w.Wake("k")
	for name, c := range map[string]<-chan struct{}{"the one that left": a, "the one waiting": b} {
		select {
		case <-c:
		default:
			t.Errorf("Wake did not close the channel of %s", name)
		}
	}
	doneB() // after the wake: a new waiter's channel is not touched
	c, doneC := w.Chan("k")
	doneB()
	if w.Len() != 1 {
		t.Fatalf("a done after Wake forgot a later waiter's key")
	}
	doneC()
	if w.Len() != 0 {
		t.Fatalf("%d keys kept once nobody waits, want 0", w.Len())
	}
	select {
	case <-c:
		t.Fatal("a later waiter's channel was closed without a Wake")
	default:
	}
}
