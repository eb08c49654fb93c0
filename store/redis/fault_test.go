package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/redis"
)

// TestBreakerUnderAFrozenAndAStoppedRedis: a Redis that stops answering,
// frozen (SIGSTOP: connections open, nothing answered) or stopped
// (connections refused), makes each operation fail within its caller's
// deadline; after three in a row the store does not send at all for its
// cool-down (store.ErrUnavailable), and once the server answers again the
// store uses it again.
func TestBreakerUnderAFrozenAndAStoppedRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	s, err := redis.Open(context.Background(), srv.URL(), redis.Options{BreakerCooldown: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	op := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := s.TakeRate(ctx, "alice", 1, 1e6, 1000)
		return err
	}
	if err := op(); err != nil {
		t.Fatal(err)
	}
	for _, fault := range []struct {
		name       string
		start, end func()
	}{
		{"frozen", srv.Freeze, srv.Thaw},
		{"stopped", srv.Stop, srv.Start},
	} {
		fault.start()
		if err := op(); err == nil || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("%s: the first operation = %v; want the server's failure to answer", fault.name, err)
		}
		// Three commands in a row unanswered open the breaker (a new
		// connection's handshake counts as one).
		open := false
		for range 3 {
			err := op()
			if err == nil {
				t.Fatalf("%s: an operation succeeded", fault.name)
			}
			if open = errors.Is(err, store.ErrUnavailable); open {
				break
			}
		}
		if !open {
			t.Fatalf("%s: after 4 failures in a row the store still sends; want store.ErrUnavailable", fault.name)
		}
		fault.end()
		deadline := time.Now().Add(10 * time.Second)
		for op() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the store was not used again within 10s of the server's return", fault.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
