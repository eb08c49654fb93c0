package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/redis"
)

// BenchmarkFrozenStore is the latency of one one-call batch while the
// Redis store is frozen (SIGSTOP: connections open, nothing answered), by
// kind of batch: plain (no store), rate-limited (rate_per_caller on the
// shared store), keyed (an idempotency key) and detached. ok/op is the
// share of batches that ran their call; the rest ended with an error
// result or status saying the store did not answer. Run with a fixed
// count, as each batch may take seconds:
//
//	go test ./engine -run '^$' -bench FrozenStore -benchtime 3x
func BenchmarkFrozenStore(b *testing.B) {
	for _, kind := range []string{"plain", "rate-limited", "keyed", "detached"} {
		b.Run(kind, func(b *testing.B) {
			srv := testenv.StartRedis(b)
			st, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			cfg, deps := Config{}, Deps{Idempotency: st, Vars: st, EventLog: st}
			if kind == "rate-limited" {
				cfg.RatePerCaller, deps.RateStore = 1e6, st
			}
			te := newTestBedWith(b, cfg, deps)
			b.Cleanup(srv.Thaw) // before the test bed's cleanup drains the engine
			batch := func(i int) bool {
				c := call("e", "echo", `{"text":"hi"}`)
				req := one(c)
				switch kind {
				case "keyed":
					c.IdempotencyKey = fmt.Sprint("k", i, time.Now().UnixNano())
				case "detached":
					req.Options = &toolwirev1.BatchOptions{Detach: true}
				}
				ctx, cancel := context.WithTimeout(as("alice"), 60*time.Second)
				defer cancel()
				events, err := te.runErr(ctx, req)
				if err != nil {
					return false
				}
				r := results(b, events)["e"]
				return r != nil && !r.GetIsError()
			}
			if !batch(-1) {
				b.Fatal("the batch failed with the store up")
			}
			srv.Freeze()
			ok := 0
			i := 0
			for b.Loop() {
				if batch(i) {
					ok++
				}
				i++
			}
			b.ReportMetric(float64(ok)/float64(i), "ok/op")
		})
	}
}
