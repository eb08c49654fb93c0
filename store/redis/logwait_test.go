package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
)

// blockedClients is the number of clients srv has blocked (XREAD BLOCK).
func blockedClients(t *testing.T, srv *testenv.RedisServer) int {
	t.Helper()
	for _, line := range strings.Split(srv.Do("INFO", "clients"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO clients has no blocked_clients")
	return 0
}

// TestLogWaitsShareConnections: many readers of a replica waiting for
// logs' next entries hold few of its pooled connections. 200 waiting on
// one log after the same entry block one connection between them, and
// all see the entry appended; 200 waiting on 200 logs block at most half
// of a pool of 10, the other half left to the replica's writes. Each
// waiter used to block a connection of its own: 10 of 10 (the whole pool)
// in both cases, the waiters beyond it failing with "connection pool
// timeout".
func TestLogWaitsShareConnections(t *testing.T) {
	srv := testenv.StartRedis(t)
	s, err := redis.Open(context.Background(), srv.URL()+"?pool_size=10", redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const readers = 200
	// wait starts a reader per log name, each waiting for an entry after
	// the first until it has one, and returns the most clients Redis had
	// blocked while they waited, once each log has a second entry.
	wait := func(t *testing.T, names []string) int {
		for _, name := range names {
			if err := s.Open(ctx, name, "owner", time.Minute, time.Minute, []byte("1")); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		for i := range readers {
			name := names[i%len(names)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					err := s.WaitLog(wctx, name, 1)
					cancel()
					if err != nil {
						errs <- err
						return
					}
					if info, err := s.Stat(ctx, name); err != nil || info.Last > 1 {
						errs <- err
						return
					}
				}
			}()
		}
		most := 0
		for range 30 { // 1.5 s: more than a block (1 s)
			most = max(most, blockedClients(t, srv))
			time.Sleep(50 * time.Millisecond)
		}
		for _, name := range names {
			if _, err := s.Append(ctx, name, "owner", []byte("2")); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("a reader: %v", err)
			}
		}
		return most
	}
	t.Run("one log", func(t *testing.T) {
		if n := wait(t, []string{"one"}); n != 1 {
			t.Errorf("%d readers of one log blocked %d connections at most; want 1", readers, n)
		}
	})
	t.Run("many logs", func(t *testing.T) {
		var names []string
		for i := range readers {
			names = append(names, fmt.Sprint("log", i))
		}
		if n := wait(t, names); n < 1 || n > 5 {
			t.Errorf("%d readers of as many logs blocked %d of 10 connections at most; want 1 to 5", readers, n)
		}
	})
}
