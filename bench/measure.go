package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// measure runs every measurement at scale sc, logging progress to log.
func measure(ctx context.Context, sc scale, supergateway string, log io.Writer) (*report, error) {
	e, err := newEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if supergateway != "" {
		if err := e.startSupergateways(ctx, supergateway); err != nil {
			return nil, err
		}
	}
	rep := &report{Go: runtime.Version(), CPUs: runtime.NumCPU(), Callers: sc.Callers}
	steps := []struct {
		name string
		f    func(context.Context, *env, scale, *report) error
	}{
		{"echo at one caller", measureSerial},
		{fmt.Sprintf("echo at %d callers", sc.Callers), measureConcurrent},
		{"lanes", measureLanes},
		{"in-flight calls", measureInFlight},
		{"cancellation and timeouts", measureCancel},
		{"batch sizes", measureSizes},
		{"MCP gateway and surface", measureGateway},
		{"detached batches", measureDetach},
	}
	for _, s := range steps {
		fmt.Fprintf(log, "bench: %s…\n", s.name)
		start := time.Now()
		if err := s.f(ctx, e, sc, rep); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(log, "bench: %s took %s\n", s.name, time.Since(start).Round(time.Millisecond))
	}
	return rep, nil
}

// systems are the ways of calling echo, in the order reported: the floor,
// toolwire's one-call ExecuteBatch and its unary CallTool, CallTool over
// the HTTP port's Connect protocol (binary, HTTP/1.1), and MCP.
func systems(e *env) []struct {
	name string
	call func(context.Context) error
} {
	return []struct {
		name string
		call func(context.Context) error
	}{
		{"grpc-unary", e.unaryEcho},
		{"toolwire", e.toolwireEcho},
		{"toolwire-calltool", e.callToolEcho},
		{"toolwire-connect", e.connectEcho},
		{"mcp", e.mcpEcho},
	}
}

// measureSerial times the systems' calls one at a time. They take
// turns in blocks: within a block one system runs hot, as a busy agent's
// calls would (alternating call by call, the slow MCP calls let the other
// two go cold, adding wake-up latency to both), while the turns still make
// a noisy neighbour slow all three alike.
func measureSerial(ctx context.Context, e *env, sc scale, rep *report) error {
	sys := systems(e)
	lat := make([][]time.Duration, len(sys))
	for _, s := range sys { // warm up connections and caches
		for range 100 {
			if err := s.call(ctx); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	const block = 50
	for n := 0; n < sc.Serial; n += block {
		for k, s := range sys {
			for range min(block, sc.Serial-n) {
				start := time.Now()
				if err := s.call(ctx); err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
				lat[k] = append(lat[k], time.Since(start))
			}
		}
	}
	for k, s := range sys {
		rep.Echo = append(rep.Echo, echoRow{System: s.name, Callers: 1, Calls: len(lat[k]),
			Latency: summarize(lat[k]), PerSecond: float64(len(lat[k])) / sum(lat[k]).Seconds()})
	}
	return nil
}

// measureGateway times the MCP calls, taking turns in blocks as
// measureSerial does: the MCP server's echo over streamable HTTP called
// directly with the go-sdk client and forwarded through toolwire (a
// one-call batch of the gateway's mcp_echo); toolwire's own echo called
// through its MCP surface (/mcp) with the same client; and the stdio MCP
// server's echo called directly, forwarded through toolwire's gRPC port,
// and through /mcp (MCP in front of MCP); and, when the run has it, through
// supergateway.
func measureGateway(ctx context.Context, e *env, sc scale, rep *report) error {
	sys := []func(context.Context) error{e.mcpEcho, e.gatewayEcho, e.surfaceEcho, e.stdioEcho, e.gatewayStdioEcho, e.surfaceStdioEcho}
	if e.sgStateful != nil {
		sys = append(sys, e.sgStateful.echo)
	}
	lat := make([][]time.Duration, len(sys))
	for _, call := range sys {
		for range 100 {
			if err := call(ctx); err != nil {
				return err
			}
		}
	}
	const block = 50
	for n := 0; n < sc.Serial; n += block {
		for k, call := range sys {
			for range min(block, sc.Serial-n) {
				start := time.Now()
				if err := call(ctx); err != nil {
					return err
				}
				lat[k] = append(lat[k], time.Since(start))
			}
		}
	}
	rep.Gateway = gatewayFigures{Direct: summarize(lat[0]), Forwarded: summarize(lat[1]), Surface: summarize(lat[2]),
		StdioDirect: summarize(lat[3]), StdioForwarded: summarize(lat[4]), StdioSurface: summarize(lat[5])}
	if e.sgStateful != nil {
		sg := summarize(lat[6])
		rep.Gateway.StdioSupergateway = &sg
	}
	if e.sgDefault != nil {
		// A child per request: a few calls, after the others.
		var l []time.Duration
		for range max(5, sc.Serial/500) {
			start := time.Now()
			if err := e.sgDefault.echo(ctx); err != nil {
				return err
			}
			l = append(l, time.Since(start))
		}
		sg := summarize(l)
		rep.Gateway.StdioSupergatewayDefault = &sg
	}
	return nil
}

// measureConcurrent gives each system turns of sc.Window with sc.Callers
// goroutines calling as fast as they can, and counts calls over its turns.
func measureConcurrent(ctx context.Context, e *env, sc scale, rep *report) error {
	sys := systems(e)
	lat := make([][]time.Duration, len(sys))
	elapsed := make([]time.Duration, len(sys))
	errs := make([]int64, len(sys))
	for range sc.Rounds {
		for k, s := range sys {
			var mu sync.Mutex
			var failed atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range sc.Callers {
				wg.Go(func() {
					var mine []time.Duration
					for time.Since(start) < sc.Window && ctx.Err() == nil {
						t := time.Now()
						if err := s.call(ctx); err != nil {
							failed.Add(1)
							continue
						}
						mine = append(mine, time.Since(t))
					}
					mu.Lock()
					lat[k] = append(lat[k], mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			elapsed[k] += time.Since(start)
			errs[k] += failed.Load()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for k, s := range sys {
		rep.Echo = append(rep.Echo, echoRow{System: s.name, Callers: sc.Callers, Calls: len(lat[k]), Errors: errs[k],
			Latency: summarize(lat[k]), PerSecond: float64(len(lat[k])) / elapsed[k].Seconds()})
	}
	return nil
}

// measureLanes times a batch of 64 safe 20 ms sleeps, which share one
// parallel lane, and 64 unsafe ones, which run one after another.
func measureLanes(ctx context.Context, e *env, sc scale, rep *report) error {
	const n, ms = 64, 20
	for _, tool := range []string{"sleep", "sleep_unsafe"} {
		req := &toolwirev1.ExecuteBatchRequest{}
		for i := range n {
			req.Calls = append(req.Calls, &toolwirev1.ToolCall{CallId: fmt.Sprint(i), Name: tool, Arguments: fmt.Sprintf(`{"ms":%d}`, ms)})
		}
		runs := sc.LaneRuns
		ideal := ms * time.Millisecond
		if tool == "sleep_unsafe" {
			runs, ideal = max(1, runs/5), n*ideal
		}
		var walls []time.Duration
		for range runs {
			start := time.Now()
			res, err := e.batch(ctx, req)
			if err != nil {
				return err
			}
			if len(res) != n {
				return fmt.Errorf("%s: %d results for %d calls", tool, len(res), n)
			}
			walls = append(walls, time.Since(start))
		}
		rep.Lanes = append(rep.Lanes, laneRow{Tool: tool, Calls: n, Safe: tool == "sleep", Ideal: ideal, Wall: summarize(walls)})
	}
	return nil
}

// measureInFlight holds sc.InFlight calls of block in flight at once and
// measures the heap they take, first as batches of 1,000 calls, then as
// one-call batches (one stream each). Client and server share the process,
// so the figure covers both ends.
func measureInFlight(ctx context.Context, e *env, sc scale, rep *report) error {
	for _, per := range []int{min(1000, sc.InFlight), 1} {
		row, err := inFlight(ctx, e, sc.InFlight, per)
		if err != nil {
			return err
		}
		rep.InFlight = append(rep.InFlight, row)
	}
	return nil
}

func inFlight(ctx context.Context, e *env, total, per int) (inFlightRow, error) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	goroutines := runtime.NumGoroutine()
	e.entered.Store(0)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errs atomic.Int64
	var wg sync.WaitGroup
	for b := 0; b < total; b += per {
		req := &toolwirev1.ExecuteBatchRequest{}
		for i := range min(per, total-b) {
			req.Calls = append(req.Calls, &toolwirev1.ToolCall{CallId: fmt.Sprint(i), Name: "block"})
		}
		wg.Go(func() {
			stream, err := e.tw.ExecuteBatch(ctx, req)
			if err != nil {
				errs.Add(1)
				return
			}
			for {
				if _, err := stream.Recv(); err != nil {
					return // cancelled at the end, as planned
				}
			}
		})
	}
	for e.entered.Load() < int64(total) {
		if ctx.Err() != nil {
			return inFlightRow{}, ctx.Err()
		}
		if errs.Load() > 0 {
			return inFlightRow{}, fmt.Errorf("%d batches failed to start", errs.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	during := heap()
	row := inFlightRow{Calls: total, CallsPerBatch: per, Goroutines: runtime.NumGoroutine() - goroutines,
		HeapPerCall: float64(during-min(before, during)) / float64(total)}
	cancel()
	wg.Wait()
	row.Errors = errs.Load()
	return row, nil
}

// measureCancel measures how long a client's cancellation takes to reach a
// running tool's context and to close the server's end of the stream, and
// by how much a call's timeout is overshot.
func measureCancel(ctx context.Context, e *env, sc scale, rep *report) error {
	if err := e.quiesce(ctx); err != nil {
		return err
	}
	done, closed := make(chan time.Time, 1), make(chan time.Time, 1)
	e.ctxDone.Store(&done)
	e.closed.Store(&closed)
	defer e.ctxDone.Store(nil)
	defer e.closed.Store(nil)
	var toTool, toClose, overshoot []time.Duration
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "block"}}}
	for range sc.CancelTrials {
		callCtx, cancel := context.WithCancel(ctx)
		stream, err := e.tw.ExecuteBatch(callCtx, req)
		if err != nil {
			cancel()
			return err
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				cancel()
				return err
			}
			if ev.GetStarted() != nil {
				break
			}
		}
		start := time.Now()
		cancel()
		toTool = append(toTool, (<-done).Sub(start))
		toClose = append(toClose, (<-closed).Sub(start))
	}

	const timeout = 20 * time.Millisecond
	req = &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "block", Timeout: durationpb.New(timeout)}}}
	for range max(1, sc.CancelTrials/10) {
		stream, err := e.tw.ExecuteBatch(ctx, req)
		if err != nil {
			return err
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				return err
			}
			if r := ev.GetResult(); r != nil {
				if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT {
					return fmt.Errorf("block with a timeout ended with %v", r.GetErrorKind())
				}
				overshoot = append(overshoot, r.GetDuration().AsDuration()-timeout)
				break
			}
		}
		<-done
		<-closed
	}
	rep.Cancel = cancelFigures{ToToolContext: summarize(toTool), ToStreamClosed: summarize(toClose),
		TimeoutOvershoot: summarize(overshoot), Timeout: timeout}
	return nil
}

// measureSizes runs batches of echo calls of growing size and reports each
// size's cost per call.
func measureSizes(ctx context.Context, e *env, sc scale, rep *report) error {
	for _, n := range sc.Sizes {
		req := &toolwirev1.ExecuteBatchRequest{}
		for i := range n {
			req.Calls = append(req.Calls, &toolwirev1.ToolCall{CallId: fmt.Sprint(i), Name: "echo", Arguments: echoArgs})
		}
		var walls []time.Duration
		for range sc.SizeRuns {
			start := time.Now()
			res, err := e.batch(ctx, req)
			if err != nil {
				return err
			}
			if len(res) != n {
				return fmt.Errorf("%d results for %d calls", len(res), n)
			}
			walls = append(walls, time.Since(start))
		}
		s := summarize(walls)
		rep.Sizes = append(rep.Sizes, sizeRow{Calls: n, Batch: s, PerCall: s.P50 / time.Duration(n)})
	}
	return nil
}

// latency is a distribution's summary.
type latency struct {
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	Mean time.Duration `json:"mean_ns"`
}

func summarize(d []time.Duration) latency {
	if len(d) == 0 {
		return latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return latency{P50: s[len(s)/2], P99: s[min(len(s)-1, len(s)*99/100)], Mean: sum(s) / time.Duration(len(s))}
}

func sum(d []time.Duration) time.Duration {
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t
}
