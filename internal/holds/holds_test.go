package holds

import "testing"

func TestCounter(t *testing.T) {
	t.Parallel()
	c := &Counter{Max: 3, PerHolder: 2}
	a1, full := c.Take("a")
	if full != nil {
		t.Fatalf("first place refused: %+v", full)
	}
	if _, full := c.Take("a"); full != nil {
		t.Fatalf("second place of a refused: %+v", full)
	}
	if _, full := c.Take("a"); full == nil || full.Total || full.Held != 2 {
		t.Fatalf("third place of a: %+v; want refused per holder, 2 held", full)
	}
	b1, full := c.Take("b")
	if full != nil {
		t.Fatalf("b's place refused: %+v", full)
	}
	if _, full := c.Take("c"); full == nil || !full.Total || full.Held != 3 {
		t.Fatalf("c's place: %+v; want refused in all, 3 held", full)
	}
	a1()
	a1() // a second release gives back nothing more
	if n := c.Held(); n != 2 {
		t.Fatalf("held after one release (twice) = %d, want 2", n)
	}
	if _, full := c.Take("c"); full != nil {
		t.Fatalf("c's place after a release: %+v", full)
	}
	b1()
	if _, ok := c.holders["b"]; ok {
		t.Error("a holder with no place is still counted")
	}
}
