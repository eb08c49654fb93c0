package grpcserve

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// BenchmarkSlowStreams measures what clients that stop reading cost the
// others (issue 11 §2). Slow streams each send a batch of 1,024 calls of a
// tool returning 130 KB (like read_file of a 130 KB file) and read only the
// first event; 8 normal callers run one-call echo batches, alternating
// between a server alone and the server beside the slow streams. It
// reports the normal callers' p50 and p99 on each and the p99 ratio, the
// batches refused with RESOURCE_EXHAUSTED, and the heap in use and RSS the
// slow streams add (client and server share the process; the client holds
// 64 KiB a stream).
//
//	go test ./service -run '^$' -bench SlowStreams -benchtime 1x
func BenchmarkSlowStreams(b *testing.B) {
	for _, tc := range []struct {
		name     string
		slow     int
		maxCalls int
	}{
		{"slow=10/max-concurrent-calls=64", 10, 64},
		{"slow=200/default-limits", 200, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				benchSlowStreams(b, tc.slow, tc.maxCalls)
			}
		})
	}
}

func benchSlowStreams(b *testing.B, slow, maxCalls int) {
	blob := tools.Tool{Name: "blob", Description: "returns 130 KB", Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return tools.Text(strings.Repeat("x", 130_000)), nil
		}}
	// Two servers alike: the normal callers alternate between the one
	// alone and the one beside the slow streams, call by call, so the
	// noise of a shared machine falls on both.
	cfg := slowBenchConfig(engine.Config{MaxConcurrentCalls: maxCalls, MaxQueueWait: time.Second})
	alone, beside := newServedServer(b, cfg, blob), newServedServer(b, cfg, blob)
	clients := [2]*testServer{{client: alone.client(b)}, {client: beside.client(b)}}

	heap0, rss0 := memUse()
	slowClient := beside.slowClient(b)
	for i := range slow {
		req := &toolwirev1.ExecuteBatchRequest{}
		for j := range 1024 {
			req.Calls = append(req.Calls, call(fmt.Sprintf("s%d-%d", i, j), "blob", ""))
		}
		stalled(b, slowClient, req)
	}
	time.Sleep(time.Second) // let the slow batches run until they stall
	heap1, rss1 := memUse()

	var mu sync.Mutex
	var lat [2][]time.Duration
	var refused atomic.Int64
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for j := range 400 {
				k := (c + j) % 2
				start := time.Now()
				_, err := clients[k].runErr(context.Background(), bigEchoes(fmt.Sprintf("n%d-%d-", c, j), 1, 100, false))
				if status.Code(err) == codes.ResourceExhausted {
					refused.Add(1)
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat[k] = append(lat[k], time.Since(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var p50, p99 [2]time.Duration
	for k := range lat {
		if len(lat[k]) == 0 {
			continue
		}
		slices.Sort(lat[k])
		p50[k], p99[k] = lat[k][len(lat[k])/2], lat[k][len(lat[k])*99/100]
	}
	b.ReportMetric(float64(p50[0].Microseconds()), "alone-p50-µs")
	b.ReportMetric(float64(p99[0].Microseconds()), "alone-p99-µs")
	b.ReportMetric(float64(p50[1].Microseconds()), "beside-p50-µs")
	b.ReportMetric(float64(p99[1].Microseconds()), "beside-p99-µs")
	if p99[0] > 0 {
		b.ReportMetric(float64(p99[1])/float64(p99[0]), "p99-ratio")
	}
	b.ReportMetric(float64(refused.Load()), "refused")
	b.ReportMetric(float64(heap1-heap0)/(1<<20), "slow-heap-MiB")
	b.ReportMetric(float64(rss1-rss0)/(1<<20), "slow-rss-MiB")
	b.ReportMetric(float64(rss1)/(1<<20), "rss-MiB")
}

// memUse returns the heap in use after a collection and the process's RSS.
func memUse() (heap, rss int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb << 10
			}
		}
	}
	return int64(m.HeapInuse), rss
}
