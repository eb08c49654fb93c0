package inflight

import (
	"sync"
	"testing"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestRetire: a retired connection refuses new calls and closes once the
// calls in flight have ended, once.
func TestRetire(t *testing.T) {
	t.Parallel()
	closes := 0
	c := New(func() { closes++ })
	if !c.Begin() || !c.Begin() {
		t.Fatal("Begin refused on a live connection")
	}
	c.Retire()
	c.Retire()
	if c.Begin() {
		t.Error("Begin accepted on a retired connection")
	}
	c.End()
	if closes != 0 || closed(c.Done()) {
		t.Fatal("closed with a call in flight")
	}
	c.End()
	if closes != 1 || !closed(c.Done()) {
		t.Fatalf("after the last call: %d closes, done %v", closes, closed(c.Done()))
	}
}

// TestRetireIdle: with no call in flight, Retire closes at once.
func TestRetireIdle(t *testing.T) {
	t.Parallel()
	closes := 0
	c := New(func() { closes++ })
	c.Begin()
	c.End()
	c.Retire()
	if closes != 1 || !closed(c.Done()) {
		t.Fatalf("%d closes, done %v", closes, closed(c.Done()))
	}
}

// TestConcurrent: calls beginning and ending while the connection is
// retired close it exactly once, after every call that began has ended.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	running, closes := 0, 0
	c := New(func() {
		mu.Lock()
		defer mu.Unlock()
		if running != 0 {
			t.Errorf("closed with %d calls running", running)
		}
		closes++
	})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if !c.Begin() {
				return
			}
			mu.Lock()
			running++
			mu.Unlock()
			mu.Lock()
			running--
			mu.Unlock()
			c.End()
		})
	}
	c.Retire()
	wg.Wait()
	<-c.Done()
	if closes != 1 {
		t.Errorf("%d closes", closes)
	}
}
