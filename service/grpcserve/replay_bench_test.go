package grpcserve

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/store/redis"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// BenchmarkReplay measures what a replayed call costs per backend: one
// in-process batch of one keyed echo call whose result is in the store.
// "no_key" is the same call run without a key, for comparison.
func BenchmarkReplay(b *testing.B) {
	backends := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"no_key", nil},
		{"memory", func(*testing.B) store.Store { return memory.New(memory.Options{}) }},
		{"bolt", func(b *testing.B) store.Store {
			s, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"), bolt.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"miniredis", func(b *testing.B) store.Store {
			mr := miniredis.RunT(b)
			c := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
			b.Cleanup(func() { c.Close() })
			return redis.New(c, redis.Options{})
		}},
		{"redis", func(b *testing.B) store.Store {
			if os.Getenv(testenv.RedisAddrVar) == "" {
				b.Skip(testenv.RedisAddrVar + " is not set")
			}
			s, err := redis.Open(context.Background(), "redis://"+os.Getenv(testenv.RedisAddrVar)+"/0", redis.Options{Prefix: "bench:"})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			var deps engine.Deps
			c := &toolwirev1.ToolCall{CallId: "1", Name: "echo", Arguments: string(echoArgs)}
			if be.open != nil {
				st := be.open(b)
				b.Cleanup(func() { st.Close() })
				deps.Idempotency, deps.Vars = st, st
				c.IdempotencyKey = "bench-key"
			}
			srv := newSurface(b, reg, engine.Config{}, deps)
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{c}}
			if err := srv.ExecuteBatch(req, nullStream{}); err != nil { // records the result
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := srv.ExecuteBatch(req, nullStream{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
