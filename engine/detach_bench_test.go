package engine

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// benchStores are the event logs the detach benchmarks run on; "redis"
// needs a real server (TOOLWIRE_TEST_REDIS_ADDR), else it is skipped.
func benchStores(b *testing.B) map[string]func(b *testing.B) store.Store {
	return map[string]func(b *testing.B) store.Store{
		"memory": func(*testing.B) store.Store { return memory.New(memory.Options{}) },
		"bolt": func(b *testing.B) store.Store {
			s, err := bolt.Open(filepath.Join(b.TempDir(), "log.db"), bolt.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
		"miniredis": func(b *testing.B) store.Store {
			rc := goredis.NewClient(&goredis.Options{Addr: miniredis.RunT(b).Addr()})
			s := redis.New(rc, redis.Options{})
			b.Cleanup(func() { s.Close(); rc.Close() })
			return s
		},
		"redis": func(b *testing.B) store.Store {
			rc := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(b)})
			s := redis.New(rc, redis.Options{Prefix: fmt.Sprintf("bench-%d:", time.Now().UnixNano())})
			b.Cleanup(func() { s.Close(); rc.Close() })
			return s
		},
	}
}

// BenchmarkDetach is a one-call batch of echo, plain and detached on each
// store: what detach costs (its events written to the store and read back
// by the batch's own stream).
func BenchmarkDetach(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, deps Deps, detach bool) {
		deps.Logger = slog.New(slog.DiscardHandler)
		e := New(Config{BatchTTL: time.Minute}, deps)
		b.Cleanup(e.Close)
		req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: `{"text":"hi"}`}},
			Options: &toolwirev1.BatchOptions{Detach: detach}}
		sink := SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })
		b.ReportAllocs()
		for b.Loop() {
			if err := e.Run(context.Background(), reg.Snapshot(), req, sink); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("plain", func(b *testing.B) { run(b, Deps{}, false) })
	for name, open := range benchStores(b) {
		b.Run("detach/"+name, func(b *testing.B) {
			s := open(b)
			run(b, Deps{EventLog: s, Vars: s, Idempotency: s}, true)
		})
	}
}

// BenchmarkDetachParallel is BenchmarkDetach's detached batch sent by 16
// callers at once on each store: what grouping the writes of many
// batches (bolt: one commit for all that queued meanwhile) saves. On bolt
// it reports the commits per batch.
func BenchmarkDetachParallel(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			e := New(Config{BatchTTL: time.Minute}, Deps{Logger: slog.New(slog.DiscardHandler), EventLog: s, Vars: s, Idempotency: s})
			b.Cleanup(e.Close)
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: `{"text":"hi"}`}},
				Options: &toolwirev1.BatchOptions{Detach: true}}
			sink := SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })
			bs, _ := s.(*bolt.Store)
			var before uint64
			if bs != nil {
				before = bs.Commits()
			}
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := e.Run(context.Background(), reg.Snapshot(), req, sink); err != nil {
						b.Error(err)
						return
					}
				}
			})
			if bs != nil {
				b.ReportMetric(float64(bs.Commits()-before)/float64(b.N), "commits/batch")
			}
		})
	}
}

// BenchmarkAttachFirstEvent is the time from AttachBatch on replica B to
// its first event, for a batch running on replica A, both on one store.
func BenchmarkAttachFirstEvent(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	for name, open := range benchStores(b) {
		if name == "bolt" {
			continue // one process's file: no second replica
		}
		b.Run(name, func(b *testing.B) {
			s := open(b)
			mk := func(replica string) *Engine {
				e := New(Config{}, Deps{Logger: slog.New(slog.DiscardHandler), EventLog: s, Vars: s, Idempotency: s, Replica: replica})
				b.Cleanup(func() { e.CancelCalls(); e.Drain(); e.Close() })
				return e
			}
			a, bb := mk("a"), mk("b")
			ctx, cancel := context.WithCancel(context.Background())
			ids := make(chan string, 1)
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "sleep", Arguments: `{"ms":600000}`}},
				Options: &toolwirev1.BatchOptions{Detach: true}}
			go func() {
				_ = a.Run(ctx, reg.Snapshot(), req, SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
					if ev.GetAccepted() != nil {
						ids <- ev.GetAccepted().GetBatchId()
					}
					return nil
				}))
			}()
			id := <-ids
			cancel()
			errFirst := fmt.Errorf("first event")
			b.ResetTimer()
			for b.Loop() {
				err := bb.Attach(context.Background(), id, 0, SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return errFirst }))
				if err != errFirst {
					b.Fatal(err)
				}
			}
		})
	}
}
