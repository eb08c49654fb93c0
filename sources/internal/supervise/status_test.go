package supervise

import (
	"context"
	"errors"
	"testing"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	h.sync(cfg{name: "a"})
	state := func() Status {
		t.Helper()
		st := h.set.Status()
		if len(st) != 1 || st[0].Name != "a" {
			t.Fatalf("Status() = %+v, want one entry for a", st)
		}
		return st[0]
	}
	if st := state(); st.State != StateDown || st.Err != "" || st.Since.IsZero() {
		t.Fatalf("before connecting: %+v, want down with no error", st)
	}
	a := h.next()
	Up(a.ctx)
	if st := state(); st.State != StateUp {
		t.Fatalf("after Up: %+v, want up", st)
	}
	a.reply <- outcome{connected: true, err: errors.New("boom")}
	h.nextRetry()
	if st := state(); st.State != StateRetrying || st.Err != "boom" {
		t.Fatalf("after a failure: %+v, want retrying with its error", st)
	}
	b := h.next()
	Up(b.ctx)
	if st := state(); st.State != StateUp || st.Err != "boom" {
		t.Fatalf("up again: %+v, want up, the last error kept", st)
	}
	Up(context.Background()) // not a Connect's context: nothing happens
	h.sync()
	if st := h.set.Status(); len(st) != 0 {
		t.Fatalf("after removing it: %+v, want none", st)
	}
}
