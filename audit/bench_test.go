package audit

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// BenchmarkAuditedCall is one unary echo call through the engine: with no
// trail (the baseline), with a trail to a file (nothing waits for the
// disk), and with a required trail (the call waits for its request entry,
// written and synced), one call at a time and many at once. Compare
// "trail" and "required" with "none" of the same run: what the trail
// costs a call.
func BenchmarkAuditedCall(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	snap := reg.Snapshot()
	bench := func(b *testing.B, cfg *Config, parallel int) {
		deps := engine.Deps{Logger: slog.New(slog.DiscardHandler)}
		var trail *Trail
		if cfg != nil {
			cfg.Log = filepath.Join(b.TempDir(), "audit.log")
			var err error
			if trail, err = Open(*cfg, slog.New(slog.DiscardHandler)); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { trail.Close() })
			// Lines the writer could not keep up with: a trail that drops
			// them is cheap for the wrong reason.
			defer func() {
				_, dropped, failed := trail.Stats()
				b.ReportMetric(float64(dropped+failed), "lost-lines")
			}()
			deps.Observer = trail
			if cfg.Required {
				deps.Admission = Gate{Trail: trail}
			}
		}
		e := engine.New(engine.Config{}, deps)
		b.Cleanup(e.Close)
		ctx := engine.WithIdentity(context.Background(), &engine.Identity{ID: "bench", Method: engine.MethodToken})
		call := &toolwirev1.ToolCall{CallId: "c", Name: "echo", Arguments: `{"text":"hello"}`}
		b.ReportAllocs()
		b.ResetTimer()
		if parallel == 0 {
			for b.Loop() {
				res, err := e.Call(ctx, snap, call, "")
				if err != nil || res.GetIsError() {
					b.Fatal(err, res)
				}
			}
			return
		}
		b.SetParallelism(parallel)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := e.Call(ctx, snap, call, "")
				if err != nil || res.GetIsError() {
					b.Error(err, res)
					return
				}
			}
		})
	}
	b.Run("none", func(b *testing.B) { bench(b, nil, 0) })
	b.Run("trail", func(b *testing.B) { bench(b, &Config{}, 0) })
	b.Run("required", func(b *testing.B) { bench(b, &Config{Required: true}, 0) })
	// Calls from 32 goroutines per CPU: the required trail's entries
	// share their writes and fsyncs.
	b.Run("none-parallel", func(b *testing.B) { bench(b, nil, 32) })
	b.Run("required-parallel", func(b *testing.B) { bench(b, &Config{Required: true}, 32) })
}
