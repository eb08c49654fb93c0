package logcut

import (
	"testing"
	"time"
)

// TestLimit: N lines a window go through, the rest are held back and
// counted on the first line through in a later window.
func TestLimit(t *testing.T) {
	l := &Limit{N: 3, Every: time.Hour}
	through := 0
	for range 1000 {
		if ok, held := l.Allow(); ok {
			through++
			if held != 0 {
				t.Errorf("a line in the first window says %d held back", held)
			}
		}
	}
	if through != 3 {
		t.Fatalf("%d of 1000 lines through in one window; want 3", through)
	}
	l.mu.Lock()
	l.start = l.start.Add(-time.Hour) // the window ends
	l.mu.Unlock()
	if ok, held := l.Allow(); !ok || held != 997 {
		t.Errorf("the next window's first line: %v, %d held back; want through, 997", ok, held)
	}
	if ok, held := l.Allow(); !ok || held != 0 {
		t.Errorf("its second: %v, %d held back; want through, 0", ok, held)
	}
	var zero Limit
	n := 0
	for range 100 {
		if ok, _ := zero.Allow(); ok {
			n++
		}
	}
	if n != 10 {
		t.Errorf("the zero Limit let %d of 100 through; want 10", n)
	}
}
