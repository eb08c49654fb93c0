package fanout

import (
	"fmt"
	"testing"
)

// TestWakeReachesOnlyTheTopicsWatchers: a topic's watchers are woken, the
// others' are not; WakeAll wakes everyone; a stopped watcher is not woken,
// and stopping twice removes it once.
func TestWakeReachesOnlyTheTopicsWatchers(t *testing.T) {
	var h Hub
	woken := map[string]int{}
	watch := func(topic, name string) func() {
		stop, ok := h.Watch(topic, func() { woken[name]++ })
		if !ok {
			t.Fatalf("Watch(%q) refused", topic)
		}
		return stop
	}
	watch("x", "x1")
	stopX2 := watch("x", "x2")
	watch("y", "y1")
	h.Wake("x")
	h.Wake("nobody")
	if woken["x1"] != 1 || woken["x2"] != 1 || woken["y1"] != 0 {
		t.Fatalf("after Wake(x): %v; want x1 and x2 once, y1 never", woken)
	}
	stopX2()
	stopX2()
	if h.Len() != 2 {
		t.Fatalf("Len = %d after one of three stopped (twice), want 2", h.Len())
	}
	h.Wake("x")
	h.WakeAll()
	if woken["x1"] != 3 || woken["x2"] != 1 || woken["y1"] != 1 {
		t.Fatalf("after a stop, Wake(x) and WakeAll: %v; want x1 3, x2 1 (stopped), y1 1", woken)
	}
}

// TestBounded: past Max watchers a Watch is refused, and a stopped one
// makes room again; an emptied topic leaves nothing behind.
func TestBounded(t *testing.T) {
	h := Hub{Max: 3}
	var stops []func()
	for i := range 3 {
		stop, ok := h.Watch(fmt.Sprint(i), func() {})
		if !ok {
			t.Fatalf("watcher %d refused under the bound", i)
		}
		stops = append(stops, stop)
	}
	called := false
	stop, ok := h.Watch("3", func() { called = true })
	if ok {
		t.Fatal("a fourth watcher was taken past Max 3")
	}
	stop()
	h.WakeAll()
	if called {
		t.Fatal("a refused watcher was woken")
	}
	stops[0]()
	if _, ok := h.Watch("3", func() {}); !ok {
		t.Fatal("a watcher was refused after one stopped")
	}
	for _, s := range stops[1:] {
		s()
	}
	if len(h.topics) != 1 {
		t.Fatalf("topics kept after their watchers stopped: %v", h.topics)
	}
}

// TestWakeMayWatch: a wake function may watch and stop (the hub's lock is
// not held while it runs), and a closed hub refuses watchers.
func TestWakeMayWatch(t *testing.T) {
	var h Hub
	var stop func()
	stop, _ = h.Watch("x", func() {
		stop()
		h.Watch("y", func() {})
	})
	h.Wake("x")
	if h.Len() != 1 {
		t.Fatalf("Len = %d, want 1 (x stopped, y watched)", h.Len())
	}
	h.Close()
	if _, ok := h.Watch("z", func() {}); ok {
		t.Fatal("a closed hub took a watcher")
	}
	h.WakeAll()
}

// TestStoppedDuringAWakeIsSkipped: a watcher stopped while a wake is being
// handed out (here by the watcher woken before it) is not woken by it.
func TestStoppedDuringAWakeIsSkipped(t *testing.T) {
	var h Hub
	var stop2 func()
	woken2 := 0
	h.Watch("x", func() { stop2() })
	stop2, _ = h.Watch("x", func() { woken2++ })
	h.Wake("x")
	if woken2 != 0 {
		t.Fatalf("a watcher stopped by the one woken before it was woken %d times", woken2)
	}
}
