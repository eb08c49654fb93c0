package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestContractMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	c := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { c.Close() })
	var n atomic.Int64
	open := func(t *testing.T) *redis.Store {
		// A prefix per subtest keeps them apart in one server.
		return redis.New(c, redis.Options{Prefix: fmt.Sprintf("t%d:", n.Add(1))})
	}
	// miniredis expires keys only when told time has passed.
	advance := storetest.WithAdvance(mr.FastForward)
	storetest.Idempotency(t, open, advance)
	storetest.Vars(t, open, advance)
	// miniredis knows no sharded pub/sub: the stores fall back to PUBLISH
	// and SUBSCRIBE, as on a Redis before 7.0.
	storetest.Signals(t, func(t *testing.T) (*redis.Store, *redis.Store) {
		prefix := fmt.Sprintf("t%d:", n.Add(1))
		a, b := redis.New(c, redis.Options{Prefix: prefix}), redis.New(goredis.NewClient(&goredis.Options{Addr: mr.Addr()}), redis.Options{Prefix: prefix})
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	})
	storetest.EventLog(t, func(t *testing.T) *redis.Store {
		return redis.New(c, redis.Options{Prefix: fmt.Sprintf("t%d:", n.Add(1)), MaxLogEntries: 5})
	}, advance, storetest.WithMaxLogEntries(5))
}

func TestContractRealRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	run := fmt.Sprintf("test%d:", time.Now().UnixNano())
	var n atomic.Int64
	open := func(t *testing.T) *redis.Store {
		s, err := redis.Open(context.Background(), "redis://"+addr+"/0", redis.Options{Prefix: fmt.Sprintf("%s%d:", run, n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Idempotency(t, open)
	storetest.Vars(t, open)
	storetest.Signals(t, func(t *testing.T) (*redis.Store, *redis.Store) {
		prefix := fmt.Sprintf("%s%d:", run, n.Add(1))
		return openAt(t, "redis://"+addr+"/0", prefix), openAt(t, "redis://"+addr+"/0", prefix)
	})
	storetest.EventLog(t, func(t *testing.T) *redis.Store {
		s, err := redis.Open(context.Background(), "redis://"+addr+"/0", redis.Options{Prefix: fmt.Sprintf("%s%d:", run, n.Add(1)), MaxLogEntries: 5})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, storetest.WithMaxLogEntries(5))
}

// TestContractLeastPrivilege: the store's whole contract holds for a
// Redis user given only what docs/deploy.md says a user of toolwire's
// needs: its prefix's keys and channel, and the command categories
// listed there.
func TestContractLeastPrivilege(t *testing.T) {
	srv := testenv.StartRedis(t)
	srv.Do(append([]string{"ACL", "SETUSER", "toolwire", "on", ">pw"}, leastPrivileged...)...)
	contractAs(t, "redis://toolwire:pw@"+srv.Addr+"/0")
}

// leastPrivileged is the ACL docs/deploy.md gives a user of toolwire's,
// for the prefixes lp…: keys, channel, command categories.
var leastPrivileged = []string{"resetkeys", "resetchannels", "~lp*", "&lp*",
	"-@all", "+@read", "+@write", "+@scripting", "+@pubsub", "+@connection", "+info"}

// contractAs runs the store's contract suites on stores opened at url,
// each with a prefix lp1:, lp2:, ….
func contractAs(t *testing.T, url string) {
	var n atomic.Int64
	open := func(t *testing.T) *redis.Store { return openAt(t, url, fmt.Sprintf("lp%d:", n.Add(1))) }
	storetest.Idempotency(t, open)
	storetest.Vars(t, open)
	storetest.Signals(t, func(t *testing.T) (*redis.Store, *redis.Store) {
		prefix := fmt.Sprintf("lp%d:", n.Add(1))
		return openAt(t, url, prefix), openAt(t, url, prefix)
	})
	storetest.EventLog(t, open)
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := redis.Open(ctx, "redis://127.0.0.1:1/0", redis.Options{}); err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
	if _, err := redis.Open(ctx, "http://x", redis.Options{}); err == nil {
		t.Fatal("Open of a non-redis URL succeeded")
	}
}

// TestEventLogAcrossClients: a log written through one client (a replica)
// is read and waited for through another, live.
func TestEventLogAcrossClients(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := fmt.Sprintf("across%d:", time.Now().UnixNano())
	ctx := context.Background()
	open := func() *redis.Store {
		s, err := redis.Open(ctx, "redis://"+addr+"/0", redis.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	if err := a.Open(ctx, "batch", "a", time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for wctx.Err() == nil {
			if err := b.WaitLog(wctx, "batch", 0); err != nil {
				got <- err.Error()
				return
			}
			for e, err := range b.After(wctx, "batch", 0) {
				if err != nil {
					got <- err.Error()
				} else {
					got <- string(e.Data)
				}
				return
			}
		}
		got <- "nothing within 10s"
	}()
	if _, err := a.Append(ctx, "batch", "a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "hello" {
		t.Fatalf("the other client read %q, want hello", g)
	}
}

// TestTakeRateRealRedis: GCRA on a real Redis, shared by two stores as two
// replicas would be: the burst is taken at once, the next call waits about
// one interval, whichever replica asks, nothing is taken by a refusal, the
// allowance comes back with time, and the key expires once it is full.
func TestTakeRateRealRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := fmt.Sprintf("rate%d:", time.Now().UnixNano())
	open := func() *redis.Store {
		s, err := redis.Open(context.Background(), "redis://"+addr+"/0", redis.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	ctx := context.Background()
	take := func(s *redis.Store, key string, n int) time.Duration {
		t.Helper()
		// One a second, 5 at once: the call after the burst must come
		// within one interval of it to be told to wait, and a loaded
		// machine can take longer than 100ms (10 a second) between two
		// round trips.
		d, err := s.TakeRate(ctx, key, n, 1, 5)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := take(a, "alice", 5); d != 0 {
		t.Fatalf("the burst: wait %v, want none", d)
	}
	d := take(b, "alice", 1) // the other replica sees it
	if d <= 0 || d > time.Second {
		t.Fatalf("after the burst, on the other replica: wait %v, want (0, 1s]", d)
	}
	if d2 := take(a, "alice", 1); d2 <= 0 || d2 > d+5*time.Millisecond {
		t.Errorf("a refusal took something: wait %v after %v", d2, d)
	}
	if d := take(a, "bob", 5); d != 0 {
		t.Errorf("bob shares alice's allowance: wait %v", d)
	}
	time.Sleep(d)
	if d := take(b, "alice", 1); d != 0 {
		t.Errorf("after the wait: %v, want none", d)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	if ttl := c.PTTL(ctx, prefix+`rate:{alice}`).Val(); ttl <= 0 || ttl > 7*time.Second {
		t.Errorf("the key's TTL is %v; want it to expire once the allowance is full again (about 6s)", ttl)
	}
}

// BenchmarkTakeRate is what a shared rate limit adds to a batch: one round
// trip to a real Redis running the GCRA script.
func BenchmarkTakeRate(b *testing.B) {
	addr := testenv.RedisAddr(b)
	s, err := redis.Open(context.Background(), "redis://"+addr+"/0", redis.Options{Prefix: fmt.Sprintf("bench%d:", time.Now().UnixNano())})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.TakeRate(ctx, "alice", 1, 1e9, 1000); err != nil {
			b.Fatal(err)
		}
	}
}

// commandCounter is a go-redis hook that counts the commands sent, each
// command of a pipeline one.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestAGroupIsOneCommand: Open, Append and Finish write a group of
// entries with one command (one script, one round trip), on a real Redis.
func TestAGroupIsOneCommand(t *testing.T) {
	addr := testenv.RedisAddr(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	s := redis.New(c, redis.Options{Prefix: fmt.Sprintf("group%d:", time.Now().UnixNano())})
	ctx := context.Background()
	// Load the scripts first: a script's first run may cost a second
	// command (EVALSHA, then EVAL when the server does not have it yet).
	if err := s.Open(ctx, "warm", "o", time.Hour, time.Hour, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "warm", "o", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "warm", "o", time.Hour, []byte("x")); err != nil {
		t.Fatal(err)
	}
	var cc commandCounter
	c.AddHook(&cc)
	data := [][]byte{[]byte("e1"), []byte("e2"), []byte("e3")}
	if err := s.Open(ctx, "l", "o", time.Hour, time.Hour, data...); err != nil {
		t.Fatal(err)
	}
	if i, err := s.Append(ctx, "l", "o", data...); err != nil || i != 6 {
		t.Fatalf("Append = %d, %v; want 6", i, err)
	}
	if err := s.Finish(ctx, "l", "o", time.Hour, data...); err != nil {
		t.Fatal(err)
	}
	if n := cc.n.Load(); n != 3 {
		t.Fatalf("%d commands for three writes of three entries each, want 3", n)
	}
	if info, err := s.Stat(ctx, "l"); err != nil || info.Last != 9 || !info.Finished {
		t.Fatalf("Stat = %+v, %v; want 9 entries, finished", info, err)
	}
}

// pipelineCounter is a go-redis hook that counts the pipelines of
// scripts sent (not the client's handshakes).
type pipelineCounter struct{ n atomic.Int64 }

func (c *pipelineCounter) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (c *pipelineCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (c *pipelineCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if name := cmds[0].Name(); name == "evalsha" || name == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestRenewalsAreOnePipeline: RenewLogs renews many logs in one pipeline
// on a real Redis, sending the script itself (a second pipeline, of the
// same renewals) only when the server does not have it.
func TestRenewalsAreOnePipeline(t *testing.T) {
	addr := testenv.RedisAddr(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	s := redis.New(c, redis.Options{Prefix: fmt.Sprintf("renewals%d:", time.Now().UnixNano())})
	ctx := context.Background()
	names := []string{"a", "b", "c", "unknown"}
	for _, name := range names[:3] {
		if err := s.Open(ctx, name, "o", time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var pc pipelineCounter
	c.AddHook(&pc)
	for _, want := range []int64{2, 1} {
		pc.n.Store(0)
		errs, err := s.RenewLogs(ctx, "o", time.Hour, names...)
		if err != nil {
			t.Fatal(err)
		}
		if errs[0] != nil || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], store.ErrLogNotFound) {
			t.Fatalf("RenewLogs = %v; want three renewed, then ErrLogNotFound", errs)
		}
		if n := pc.n.Load(); n != want {
			t.Fatalf("%d pipelines for %d renewals, want %d", n, len(names), want)
		}
	}
}
