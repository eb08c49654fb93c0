package redis_test

import (
	"context"
	"fmt"
	"io"
	"net"
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

// commandCalls is how many times srv ran each command since its last
// CONFIG RESETSTAT, by name (INFO commandstats).
func commandCalls(t *testing.T, srv *testenv.RedisServer) map[string]int {
	t.Helper()
	calls := map[string]int{}
	for _, line := range strings.Split(srv.Do("INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[name], _ = strconv.Atoi(n)
	}
	return calls
}

// TestLogReadersShareReads: 200 readers of one log on one replica, each
// waiting for the next entry and reading it (WaitLog, After), as the
// attachments of one detached batch do. Per entry appended they cost
// Redis a few reads between them, not a few each: the log's state and
// its new entries are read once for all who ask at once. They used to
// cost three round trips each, 600 an entry, the replica's writes
// queued behind them.
//
// The store reaches Redis through a proxy that delays each answer by
// 5 ms, a round trip across a network: a read shared by those who ask
// while it is under way shares as much as the readers overlap, and on
// loopback a read took less time than 200 goroutines under -race take to
// wake on a loaded machine (load 15: 151 to 852 reads for 4 entries, the
// readers asking one after another; 20 on a quiet one).
func TestLogReadersShareReads(t *testing.T) {
	srv := testenv.StartRedis(t)
	s, err := redis.Open(context.Background(), "redis://"+slowProxy(t, srv.Addr, 5*time.Millisecond)+"/0", redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const readers, entries = 200, 5
	if err := s.Open(ctx, "log", "owner", time.Minute, time.Minute, []byte("1")); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen = map[uint64]int{} // readers that have read up to each index
		wg   sync.WaitGroup
	)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i < entries; {
				if err := s.WaitLog(ctx, "log", i); err != nil {
					t.Error(err)
					return
				}
				for e, err := range s.After(ctx, "log", i) {
					if err != nil {
						t.Error(err)
						return
					}
					if string(e.Data) != fmt.Sprint(e.Index) {
						t.Errorf("entry %d reads %q", e.Index, e.Data)
					}
					i = e.Index
					mu.Lock()
					seen[i]++
					mu.Unlock()
				}
			}
		}()
	}
	all := func(i uint64) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return seen[i] == readers }
	}
	waitBlocked := func() {
		for blockedClients(t, srv) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitBlocked()
	srv.Do("CONFIG", "RESETSTAT")
	for i := uint64(2); i <= entries; i++ {
		if _, err := s.Append(ctx, "log", "owner", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		for !all(i)() {
			time.Sleep(5 * time.Millisecond)
		}
		if i < entries {
			waitBlocked()
		}
	}
	wg.Wait()
	calls := commandCalls(t, srv)
	appends := entries - 1
	reads := calls["evalsha"] + calls["eval"] - appends + calls["xrange"] + calls["xread"]
	t.Logf("%d reads for %d entries: %v", reads, appends, calls)
	if reads > 20*appends {
		t.Errorf("%d readers of one log made %d reads for %d entries appended (%v); want at most %d", readers, reads, appends, calls, 20*appends)
	}
}

// slowProxy forwards connections to addr, each answer delay late, and
// returns its address.
func slowProxy(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() { // asked: at once
				io.Copy(u, c)
				u.Close()
			})
			wg.Go(func() { // answered: late
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}
