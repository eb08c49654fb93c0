// Command stalled measures, from outside, what clients that stop reading
// cost a real "toolwire serve" and the callers beside them (issue 18). It
// starts two servers from the binary it is given, alike: one alone and one
// beside the stalled streams. It opens the stalled streams on the second,
// each a batch of read_file calls of a 130 KB file (100 KiB results) whose
// client reads the first event and then nothing, waits for the server's
// RSS to settle, and then runs rounds of normal callers (one-call echo
// batches) that alternate call by call between the two servers, so the
// noise of a shared machine falls on both. It reports
// the RSS the stalled streams add to their server (settled and at its
// peak), the normal callers' p50 and p99 on each server and their p99
// ratio, the normal calls refused or failed, the streams the server ended
// (the toolwire_streams_ended_total metric, where the binary has it) and
// the connections it closed.
//
//	go build -o /tmp/toolwire ./cmd/toolwire
//	go run ./bench/stalled --toolwire /tmp/toolwire --streams 200
//	go run ./bench/stalled --toolwire /tmp/toolwire --streams 2000 -- --max-buffered-bytes 134217728
//	go run ./bench/stalled --toolwire /tmp/toolwire --surface mcp --streams 200
//
// With --surface mcp the same is measured on /mcp (issue 27): each stalled
// client is a request to the HTTP port over h2c (HTTP/2 without TLS, with
// the same fixed windows and streams per connection as the gRPC clients)
// sending one 2026-07-28 tools/call of echo with --mcp-text bytes of text,
// whose result (about twice that: its text and its structuredContent; 1.8
// MB by default) it never reads. The normal callers are go-sdk MCP
// clients calling echo. The servers then also get an HTTP port and
// max_result_bytes 2,000,000; before the RSS settles, the stalled server
// is made to collect its garbage, since each stalled call is parsed and
// encoded several times on its way. --open-interval spaces the stalled
// clients out.
//
// Arguments after -- go to both servers' "toolwire serve". The servers get a
// send timeout of an hour, so the stalled streams outlive the measurement
// unless something else ends them.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/bench/internal/proc"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stalled:", err)
		os.Exit(1)
	}
}

type options struct {
	bin          string
	streams      int
	perConn      int
	window       int
	calls        int
	callers      int
	normalCalls  int
	rounds       int
	settle       time.Duration
	heapProfile  string
	serveArgs    []string
	resultBytes  int
	keepRunning  bool
	serverLog    string
	openInterval time.Duration
	surface      string
	mcpText      int
}

func parseArgs(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("stalled", flag.ContinueOnError)
	fs.StringVar(&o.bin, "toolwire", "", "the toolwire `binary` to measure (required)")
	fs.IntVar(&o.streams, "streams", 200, "stalled streams to open")
	fs.IntVar(&o.perConn, "streams-per-conn", 100, "stalled streams per client connection")
	fs.IntVar(&o.window, "client-window", 64<<10, "the stalled clients' HTTP/2 flow-control windows, fixed (0: gRPC's default, which grows them up to 16 MiB a stream, in the client's memory)")
	fs.IntVar(&o.calls, "calls", 1024, "read_file calls in each stalled batch")
	fs.IntVar(&o.resultBytes, "file-bytes", 130_000, "size of the file the stalled calls read (read_file returns at most 100 KiB of it)")
	fs.IntVar(&o.callers, "callers", 8, "normal callers")
	fs.IntVar(&o.normalCalls, "normal-calls", 400, "one-call batches per normal caller and round")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds of normal calls beside the stalled streams")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "how long RSS must hold still (within 2%) before it is read, at most 20 times this")
	fs.DurationVar(&o.openInterval, "open-interval", 0, "pause between opening two stalled streams")
	fs.StringVar(&o.heapProfile, "heap-profile", "", "write the stalled server's heap profile (pprof, from its admin listener) to `file` once settled")
	fs.StringVar(&o.serverLog, "server-log", "", "copy the stalled server's stderr to `file` (with GODEBUG=gctrace=1 in the environment, its collections too)")
	fs.BoolVar(&o.keepRunning, "keep", false, "after measuring, keep the servers and streams until interrupted (to look at them with pprof)")
	fs.StringVar(&o.surface, "surface", "grpc", "where the clients call: grpc (ExecuteBatch on the gRPC port) or mcp (tools/call on /mcp)")
	fs.IntVar(&o.mcpText, "mcp-text", 900_000, "with --surface mcp: bytes of text each stalled client's echo call sends, and so gets back twice")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.bin == "" {
		return o, errors.New("--toolwire is required")
	}
	o.serveArgs = fs.Args()
	o.rounds = max(o.rounds, 1)
	if o.surface != "grpc" && o.surface != "mcp" {
		return o, fmt.Errorf("--surface %q: want grpc or mcp", o.surface)
	}
	return o, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseArgs(args)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "stalled")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Lines of 64 bytes, as source code might have: read_file numbers them
	// and returns at most 100 KiB.
	line := strings.Repeat("x", 63) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat(line, o.resultBytes/len(line))), 0o644); err != nil {
		return err
	}

	alone, err := startServer(ctx, o, dir, "")
	if err != nil {
		return err
	}
	defer alone.stop()
	beside, err := startServer(ctx, o, dir, o.serverLog)
	if err != nil {
		return err
	}
	defer beside.stop()

	servers := [2]*server{alone, beside}
	// Warm both up, so the baseline holds what serving costs anyway.
	calls := normalCalls
	if o.surface == "mcp" {
		calls = normalCallsMCP
	}
	if _, err := calls(ctx, servers, o.callers, 50); err != nil {
		return err
	}
	base := beside.settledRSS(o.settle)
	fmt.Fprintf(out, "baseline RSS: alone %.0f MB, beside %.0f MB\n", mb(alone.rss()), mb(base))

	peak := beside.watchPeak()
	open := openStalled
	if o.surface == "mcp" {
		open = openStalledMCP
	}
	stalled, err := open(ctx, beside, o)
	if err != nil {
		return err
	}
	defer stalled.close()
	if o.surface == "mcp" {
		// A request the server ends (its write stalled, for the budget)
		// before its response's header reached the client fails here.
		fmt.Fprintf(out, "opened %d stalled requests (%d failed or ended before their response began: %v; responses other than 200: %v)\n", o.streams, stalled.refused, stalled.firstErr, stalled.statuses)
	} else {
		fmt.Fprintf(out, "opened %d stalled streams (%d refused: %v)\n", o.streams-stalled.refused, stalled.refused, stalled.firstErr)
	}
	if o.surface == "mcp" {
		// Each stalled call's arguments and result are parsed and encoded
		// several times on the way (megabytes each), which a loaded
		// machine does long after the requests were sent: wait until the
		// calls have run, then collect that garbage, so that what is
		// settled is what the stalled clients hold.
		beside.quiet("gen_ai_execute_tool_duration_seconds_count", o.settle)
		beside.collect()
	}
	settled := beside.settledRSS(o.settle)
	fmt.Fprintf(out, "settled: heap in use %s bytes (go_memstats_heap_inuse_bytes)\n", beside.metric("go_memstats_heap_inuse_bytes"))
	fmt.Fprintf(out, "settled: the server counts %s bytes of events waiting for readers (toolwire_buffered_bytes)\n", beside.metric("toolwire_buffered_bytes"))
	if o.heapProfile != "" {
		if err := beside.heapProfile(o.heapProfile); err != nil {
			return err
		}
	}

	var all latencies
	var ratios []float64
	for r := range o.rounds {
		lat, err := calls(ctx, servers, o.callers, o.normalCalls)
		if err != nil {
			return err
		}
		_, p99a := lat.percentiles(0)
		_, p99b := lat.percentiles(1)
		ratio := float64(p99b) / float64(max(p99a, 1))
		ratios = append(ratios, ratio)
		fmt.Fprintf(out, "round %d: normal callers' p99 alone %s, beside %s: ratio %.2f\n", r+1, p99a, p99b, ratio)
		all.add(lat)
	}
	after := beside.rss()
	maxRSS := peak()
	ended := beside.metric("toolwire_streams_ended_total")

	fmt.Fprintf(out, "stalled server RSS: settled %.0f MB (+%.0f MB), after the normal calls %.0f MB (+%.0f MB), peak %.0f MB (+%.0f MB)\n",
		mb(settled), mb(settled-base), mb(after), mb(after-base), mb(maxRSS), mb(maxRSS-base))
	fmt.Fprintf(out, "streams the server ended: %s; connections it closed: %d\n", ended, beside.closed.Load())
	for k, name := range []string{"alone", "beside"} {
		p50, p99 := all.percentiles(k)
		fmt.Fprintf(out, "normal callers %-6s: p50 %s p99 %s (%d calls)\n", name, p50, p99, len(all.d[k]))
	}
	slices.Sort(ratios)
	_, p99a := all.percentiles(0)
	_, p99b := all.percentiles(1)
	fmt.Fprintf(out, "p99 ratio (beside / alone): %.2f over all rounds; per round median %.2f, range %.2f-%.2f\n",
		float64(p99b)/float64(max(p99a, 1)), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
	fmt.Fprintf(out, "normal calls refused: alone %d, beside %d; other errors: alone %d, beside %d\n",
		all.refused[0], all.refused[1], all.failed[0], all.failed[1])
	if o.keepRunning {
		fmt.Fprintf(out, "servers: alone %s (admin %s), beside %s (admin %s); interrupt to stop\n", alone.addr, alone.admin, beside.addr, beside.admin)
		<-ctx.Done()
	}
	return nil
}

// server is one "toolwire serve" process.
type server struct {
	cmd    *exec.Cmd
	addr   string
	http   string // the HTTP port's address, with --surface mcp
	admin  string
	done   chan struct{}
	closed atomic.Int64 // connections the server said it closed for their unread streams
}

func startServer(ctx context.Context, o options, dir, logPath string) (*server, error) {
	args := []string{"serve", "--diag", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--workspace", dir, "--log-format", "json", "--send-timeout", "1h"}
	if o.surface == "mcp" {
		args = append(args, "--http-listen", "127.0.0.1:0", "--max-result-bytes", "2000000")
	}
	args = append(args, o.serveArgs...)
	cmd := exec.Command(o.bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	var logFile io.Writer = io.Discard
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
		defer func() { go func() { <-s.done; f.Close() }() }()
		logFile = f
	}
	ready := make(chan struct{})
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(io.TeeReader(stderr, logFile))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
				Addr  string `json:"addr"`
				Admin string `json:"admin_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch {
			case line.Admin != "":
				s.admin = line.Admin
			case strings.HasPrefix(line.Msg, "toolwire HTTP port listening"):
				s.http = line.Addr
			case line.Addr != "" && s.addr == "":
				s.addr = line.Addr
				close(ready)
			case strings.HasPrefix(line.Msg, "closing the connection"):
				s.closed.Add(1)
			case line.Level == "ERROR":
				fmt.Fprintln(os.Stderr, "server:", sc.Text())
			}
		}
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.done:
		cmd.Wait()
		return nil, fmt.Errorf("%s exited before listening: %v", o.bin, cmd.ProcessState)
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, errors.New("the server did not say where it listens within 30s")
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

func (s *server) stop() { proc.Stop(s.cmd, s.done) }

// rss is the process's resident set size, from /proc.
func (s *server) rss() int64 { return proc.RSS(s.cmd.Process.Pid) }

// settledRSS waits until RSS holds within 2% for d (at most 20 d) and
// returns it.
func (s *server) settledRSS(d time.Duration) int64 { return proc.SettledRSS(s.cmd.Process.Pid, d) }

// watchPeak samples RSS every 50ms until the returned function is called,
// which returns the largest sample.
func (s *server) watchPeak() func() int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if r := s.rss(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-t.C:
			case <-stop:
				return
			}
		}
	}()
	return func() int64 { close(stop); <-done; return peak.Load() }
}

// quiet waits until the counter name has held still for d (at most 20 d).
func (s *server) quiet(name string, d time.Duration) {
	deadline := time.Now().Add(20 * d)
	last, since := s.metric(name), time.Now()
	for time.Now().Before(deadline) && time.Since(since) < d {
		time.Sleep(d / 10)
		if now := s.metric(name); now != last {
			last, since = now, time.Now()
		}
	}
}

// collect makes the server collect its garbage (the admin listener's heap
// profile with gc=1).
func (s *server) collect() {
	if resp, err := http.Get("http://" + s.admin + "/debug/pprof/heap?gc=1"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (s *server) heapProfile(path string) error {
	resp, err := http.Get("http://" + s.admin + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// metric returns the sum of a Prometheus counter's samples, or "n/a".
func (s *server) metric(name string) string { return proc.Metric(s.admin, name) }

// stalledStreams are streams whose client reads nothing after the first
// event.
type stalledStreams struct {
	conns []*grpc.ClientConn
	// with --surface mcp:
	transports []*http.Transport
	bodies     []io.ReadCloser
	statuses   []int // of the responses that began, other than 200
	cancel     context.CancelFunc
	refused    int
	firstErr   error
}

func openStalled(ctx context.Context, s *server, o options) (*stalledStreams, error) {
	addr := s.addr
	ctx, cancel := context.WithCancel(ctx)
	st := &stalledStreams{cancel: cancel}
	req := &toolwirev1.ExecuteBatchRequest{}
	for j := range o.calls {
		req.Calls = append(req.Calls, &toolwirev1.ToolCall{CallId: fmt.Sprint("c", j), Name: "read_file", Arguments: `{"path":"big.txt"}`})
	}
	var client toolwirev1.ToolServiceClient
	for i := range o.streams {
		if i%o.perConn == 0 {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if o.window > 0 {
				// Fixed windows turn off gRPC's growing them (BDP), so a
				// stream nobody reads holds o.window in this process.
				opts = append(opts, grpc.WithInitialWindowSize(int32(o.window)), grpc.WithInitialConnWindowSize(int32(o.window)))
			}
			conn, err := grpc.NewClient(addr, opts...)
			if err != nil {
				st.close()
				return nil, err
			}
			st.conns = append(st.conns, conn)
			client = toolwirev1.NewToolServiceClient(conn)
		}
		stream, err := client.ExecuteBatch(ctx, req)
		if err == nil {
			_, err = stream.Recv() // BatchAccepted; then nothing more is read
		}
		if err != nil {
			st.refused++
			if st.firstErr == nil {
				st.firstErr = err
			}
		}
		if o.openInterval > 0 {
			time.Sleep(o.openInterval)
		}
	}
	return st, nil
}

func (st *stalledStreams) close() {
	st.cancel()
	for _, c := range st.conns {
		c.Close()
	}
	for _, b := range st.bodies {
		b.Close()
	}
	for _, tr := range st.transports {
		tr.CloseIdleConnections()
	}
}

// latencies are the normal callers' one-call batches, per server (0 alone,
// 1 beside).
type latencies struct {
	d       [2][]time.Duration
	refused [2]int
	failed  [2]int
}

func (l *latencies) add(m *latencies) {
	for k := range l.d {
		l.d[k] = append(l.d[k], m.d[k]...)
		l.refused[k] += m.refused[k]
		l.failed[k] += m.failed[k]
	}
}

func (l *latencies) percentiles(k int) (p50, p99 time.Duration) {
	d := l.d[k]
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100]
}

// normalCalls runs callers callers, each making n one-call echo batches
// that alternate between the two servers.
func normalCalls(ctx context.Context, servers [2]*server, callers, n int) (*latencies, error) {
	var clients [2]toolwirev1.ToolServiceClient
	for k, s := range servers {
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		clients[k] = toolwirev1.NewToolServiceClient(conn)
	}
	var mu sync.Mutex
	lat := &latencies{}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for j := range n {
				k := (c + j) % 2
				req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{
					CallId: fmt.Sprintf("n%d-%d", c, j), Name: "echo", Arguments: `{"text":"` + strings.Repeat("n", 100) + `"}`}}}
				start := time.Now()
				err := oneBatch(ctx, clients[k], req)
				d := time.Since(start)
				mu.Lock()
				switch {
				case status.Code(err) == codes.ResourceExhausted:
					lat.refused[k]++
				case err != nil:
					lat.failed[k]++
				default:
					lat.d[k] = append(lat.d[k], d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, ctx.Err()
}

// oneBatch runs req to its end; a failed result is an error too.
func oneBatch(ctx context.Context, c toolwirev1.ToolServiceClient, req *toolwirev1.ExecuteBatchRequest) error {
	stream, err := c.ExecuteBatch(ctx, req)
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r := ev.GetResult(); r != nil && r.GetIsError() {
			return fmt.Errorf("call %s: %s", r.GetCallId(), r.GetErrorKind())
		}
	}
}

func mb(n int64) float64 { return float64(n) / 1e6 }
