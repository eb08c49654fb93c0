package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/redis"
)

// TestClusterSlotInMigration: while a slot moves to another master
// (redis-cli --cluster reshard or rebalance), a script whose keys are
// not all on one of the two masters is answered TRYAGAIN for as long as
// the slot moves: a new record's claim and a new log's open (no key yet:
// the old master answers ASK, the new one TRYAGAIN), a completed
// record's replay and a finished log's Stat (their lease key is gone).
// go-redis sends such a command 4 times within some 100 ms and gives up;
// the store tries again until the slot has moved, and each operation
// succeeds once it has.
func TestClusterSlotInMigration(t *testing.T) {
	cl := testenv.StartRedisCluster(t)
	ctx, cancel := context.WithDeadline(context.Background(), testenv.Deadline(t))
	defer cancel()
	s, err := redis.Open(ctx, cl.URL(), redis.Options{Prefix: "mig:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Names whose records and logs share one slot (keys.go: the name is
	// the hash tag).
	slot := testenv.KeySlot("done")
	names := []string{"done"}
	for i := 0; len(names) < 4; i++ {
		if n := fmt.Sprint("n", i); testenv.KeySlot(n) == slot {
			names = append(names, n)
		}
	}
	completed, finished, fresh, freshLog := names[0], names[1], names[2], names[3]
	if _, err := s.Claim(ctx, completed, "fp", "o", time.Minute, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, completed, "o", []byte("result"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx, finished, "o", time.Minute, time.Hour, []byte("e1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, finished, "o", time.Hour, []byte("e2")); err != nil {
		t.Fatal(err)
	}

	ops := []struct {
		name string
		run  func(context.Context) error
	}{
		{"claim a new key", func(ctx context.Context) error {
			c, err := s.Claim(ctx, fresh, "fp", "o", time.Minute, time.Hour)
			if err == nil && c.State != store.Claimed {
				err = fmt.Errorf("state %v, want claimed", c.State)
			}
			return err
		}},
		{"replay a completed record", func(ctx context.Context) error {
			c, err := s.Claim(ctx, completed, "fp", "o2", time.Minute, time.Hour)
			if err == nil && (c.State != store.Completed || string(c.Result) != "result") {
				err = fmt.Errorf("state %v %q, want completed", c.State, c.Result)
			}
			return err
		}},
		{"stat a finished log", func(ctx context.Context) error {
			info, err := s.Stat(ctx, finished)
			if err == nil && (!info.Finished || info.Last != 2) {
				err = fmt.Errorf("%+v, want finished at 2", info)
			}
			return err
		}},
		{"open a new log", func(ctx context.Context) error {
			return s.Open(ctx, freshLog, "o", time.Minute, time.Hour, []byte("e1"))
		}},
	}

	from := cl.MasterOf(t, "{done}")
	var to *testenv.RedisNode
	for _, m := range cl.Masters(t) {
		if m != from {
			to = m
			break
		}
	}
	tryAgains := func() int {
		n := 0
		for _, node := range []*testenv.RedisNode{from, to} {
			for _, line := range strings.Split(node.Do(t, "INFO", "errorstats"), "\r\n") {
				if v, ok := strings.CutPrefix(line, "errorstat_TRYAGAIN:count="); ok {
					c, _ := strconv.Atoi(v)
					n += c
				}
			}
		}
		return n
	}
	errs := make(chan error, len(ops))
	started := false
	cl.MigrateSlot(t, slot, to, func() {
		if started {
			return
		}
		started = true
		// The slot half moved: each operation is answered TRYAGAIN. The
		// move goes on once they have been answered so more often than
		// go-redis tries (4 times), or have ended.
		before := tryAgains()
		for _, op := range ops {
			go func() {
				if err := op.run(ctx); err != nil {
					errs <- fmt.Errorf("%s while the slot moved: %w", op.name, err)
					return
				}
				errs <- nil
			}()
		}
		for tryAgains()-before < 5*len(ops) && len(errs) < len(ops) {
			time.Sleep(10 * time.Millisecond)
		}
	})
	for range ops {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test's deadline passed")
	}
}
