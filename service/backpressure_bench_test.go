package service

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

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// BenchmarkSlowStreams measures what clients that stop reading cost the
// others (issue 11 §2): 8 normal callers run one-call echo batches, first
// alone, then beside slow streams that each send a batch of 1,024 calls of
// a tool returning 130 KB (like read_file of a 130 KB file) and read only
// the first event. It reports the normal
// callers' p50 and p99 in both phases and their ratio, the calls refused
// with RESOURCE_EXHAUSTED, and the heap in use and RSS the slow streams add
// (client and server share the process; the client holds 64 KiB a stream).
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
	s := newServedServer(b, slowBenchConfig(Limits{MaxConcurrentCalls: maxCalls, MaxQueueWait: time.Second}), blob)
	normal := &testServer{client: s.client(b)}
	phase := func() (p50, p99 time.Duration, refused int64) {
		var mu sync.Mutex
		var lat []time.Duration
		var busy atomic.Int64
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				for j := range 50 {
					start := time.Now()
					_, err := normal.runErr(context.Background(), bigEchoes(fmt.Sprintf("n%d-%d-", c, j), 1, 100, false))
					if status.Code(err) == codes.ResourceExhausted {
						busy.Add(1)
						continue
					}
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					lat = append(lat, time.Since(start))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(lat) == 0 {
			return 0, 0, busy.Load()
		}
		slices.Sort(lat)
		return lat[len(lat)/2], lat[len(lat)*99/100], busy.Load()
	}
	heap0, rss0 := memUse()
	alone50, alone99, _ := phase()

	slowClient := s.slowClient(b)
	for i := range slow {
		req := &toolwirev1.ExecuteBatchRequest{}
		for j := range 1024 {
			req.Calls = append(req.Calls, call(fmt.Sprintf("s%d-%d", i, j), "blob", ""))
		}
		stalled(b, slowClient, req)
	}
	time.Sleep(time.Second) // let the slow batches run until they stall
	heap1, rss1 := memUse()
	beside50, beside99, refused := phase()

	b.ReportMetric(float64(alone50.Microseconds()), "alone-p50-µs")
	b.ReportMetric(float64(alone99.Microseconds()), "alone-p99-µs")
	b.ReportMetric(float64(beside50.Microseconds()), "beside-p50-µs")
	b.ReportMetric(float64(beside99.Microseconds()), "beside-p99-µs")
	if alone99 > 0 {
		b.ReportMetric(float64(beside99)/float64(alone99), "p99-ratio")
	}
	b.ReportMetric(float64(refused), "refused")
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
