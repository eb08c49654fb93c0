package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPerCallerDefaultShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		perCaller int
		caller    string
		wantCap   int // 0: none
	}{
		{"authenticated caller gets a quarter", 0, "alice", 2},
		{"anonymous caller is not capped by default", 0, "", 0},
		{"a set cap applies to the anonymous caller", 3, "", 3},
		{"negative turns the cap off", -1, "alice", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := New(Config{MaxConcurrentCalls: 8, MaxCallsPerCaller: tt.perCaller})
			defer srv.Close()
			taken := 0
			for ; taken < 8; taken++ {
				if _, err := srv.limits.acquire(context.Background(), tt.caller, 0); err != nil {
					break
				}
			}
			want := tt.wantCap
			if want == 0 {
				want = 8
			}
			if taken != want {
				t.Errorf("caller %q took %d slots, want %d", tt.caller, taken, want)
			}
			if tt.wantCap != 0 {
				if _, err := srv.limits.acquire(context.Background(), "bob", 0); err != nil {
					t.Errorf("another caller is locked out: %v", err)
				}
			}
		})
	}
}

func TestLimiterGivesBackWhatItTakes(t *testing.T) {
	t.Parallel()
	l := newLimiter(2, 1, true)
	ctx := context.Background()
	a, err := l.acquire(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire(ctx, "a", 0); !errors.As(err, new(*errBusy)) {
		t.Errorf("a's second slot: err = %v, want errBusy", err)
	}
	b, err := l.acquire(ctx, "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire(ctx, "c", 0); err == nil || !strings.Contains(err.Error(), "server") {
		t.Errorf("third caller over the global cap: err = %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.acquire(cancelled, "c", time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: err = %v, want context.Canceled", err)
	}
	l.release(a)
	l.release(b)
	if len(l.global) != 0 || len(l.callers) != 0 {
		t.Errorf("after release: %d global slots taken, %d callers tracked", len(l.global), len(l.callers))
	}
}
