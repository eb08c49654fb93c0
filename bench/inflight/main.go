// Command inflight measures what calls in flight cost one replica (issue
// 32): it holds --calls one-call streams open on a server in another
// process, each a call that blocks until released, and reports per call
// what the server holds (its Go heap and goroutine stacks after a
// collection, and its resident set size from /proc), its goroutines, the
// time to open them all and to release them all, and the streams that
// failed (there must be none). It measures two servers side by side in one
// run, one after the other on the same machine:
//
//   - grpc: a bare grpc-go server (grpc.NewServer() with nothing added)
//     whose server-streaming method sends one message, holds until
//     released, sends one more and returns: what gRPC itself costs per
//     stream;
//   - toolwire: toolwire's gRPC surface (grpcserve.New on engine.New, served
//     by grpcserve.Serve, so with the options serve's gRPC port has) with
//     the diag tools and one more, hold, which blocks until released; each
//     stream is a one-call ExecuteBatch of hold, held once its client has
//     read CallStarted and the call is inside hold.
//
// The difference is toolwire's share. The server is this command run again
// with --serve (its code is this tree's, so running the command in another
// worktree measures that tree's toolwire); the client, in this process,
// opens the streams over --conns connections (gRPC puts no bound on the
// streams of one connection; several spread the transport's work), and
// speaks to its server over the child's stdin and stdout: "stats" (the
// server collects its garbage and answers its figures) and "release"
// (every held call returns: hold with a text result).
//
//	go run ./bench/inflight                      # 50,000 streams on each server
//	go run ./bench/inflight --calls 10000 --servers toolwire
//
// Calls are given an hour (call_timeout and max_call_timeout), so none ends
// before it is released; the engine's batch and call limits are raised to
// hold them all.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolwire/toolwire/bench/internal/proc"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if serve, calls, ok := serveArgs(os.Args[1:]); ok {
		err = runServer(ctx, serve, calls, os.Stdin, os.Stdout)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inflight:", err)
		os.Exit(1)
	}
}

type options struct {
	calls   int
	conns   int
	opening int
	servers []string
	settle  time.Duration
	// heapProfile has each server write its heap profile to heap.pprof
	// while the calls are held (the last server's stays).
	heapProfile bool
}

func parseArgs(args []string) (options, error) {
	var o options
	var servers string
	fs := flag.NewFlagSet("inflight", flag.ContinueOnError)
	fs.IntVar(&o.calls, "calls", 50_000, "one-call streams to hold open at once")
	fs.IntVar(&o.conns, "conns", 50, "client connections the streams are spread over")
	fs.IntVar(&o.opening, "opening", 256, "streams being opened at once")
	fs.StringVar(&servers, "servers", "grpc,toolwire", "the servers to measure, in order: grpc, toolwire")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "how long the server's RSS must hold within 2% before it is read (at most 20 times this)")
	fs.BoolVar(&o.heapProfile, "heap-profile", false, "have the server write its heap profile to heap.pprof in the working directory while the calls are held")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.calls < 1 || o.conns < 1 || o.opening < 1 {
		return o, errors.New("--calls, --conns and --opening must be positive")
	}
	for s := range strings.SplitSeq(servers, ",") {
		if s != "grpc" && s != "toolwire" {
			return o, fmt.Errorf("--servers: unknown server %q (want grpc or toolwire)", s)
		}
		o.servers = append(o.servers, s)
	}
	return o, nil
}

// row is one server's figures.
type row struct {
	Server       string
	Calls        int
	GoPerCall    float64 // bytes of heap and goroutine stacks per held call
	HeapPerCall  float64 // of which heap
	StackPerCall float64 // of which stacks
	RSSPerCall   float64 // bytes of resident set per held call
	Goroutines   float64 // per held call
	Open         time.Duration
	Release      time.Duration
	Errors       int64
	FirstError   error
	LeftOver     int // goroutines the server runs after the release beyond its baseline
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseArgs(args)
	if err != nil {
		return err
	}
	raiseFileLimit()
	var rows []row
	for _, name := range o.servers {
		fmt.Fprintf(os.Stderr, "inflight: %s, %d streams…\n", name, o.calls)
		r, err := measure(ctx, o, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, r)
	}
	fmt.Fprintf(out, "%d one-call streams held at once on one server, over %d connections from another process\n\n", o.calls, o.conns)
	fmt.Fprintln(out, "| server | heap+stacks / call | heap | stacks | RSS / call | goroutines / call | open all | release all | errors |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %.2f KiB | %.2f KiB | %.2f KiB | %.2f KiB | %.2f | %s | %s | %d |\n", r.Server,
			r.GoPerCall/1024, r.HeapPerCall/1024, r.StackPerCall/1024, r.RSSPerCall/1024, r.Goroutines,
			r.Open.Round(time.Millisecond), r.Release.Round(time.Millisecond), r.Errors)
	}
	var base *row
	for i := range rows {
		if rows[i].Server == "grpc" {
			base = &rows[i]
		}
	}
	for _, r := range rows {
		if r.Server != "grpc" && base != nil {
			fmt.Fprintf(out, "\n%s over bare gRPC, per call: %.2f KiB of heap and stacks (%.2f heap, %.2f stacks), %.2f KiB of RSS, %.2f goroutines\n", r.Server,
				(r.GoPerCall-base.GoPerCall)/1024, (r.HeapPerCall-base.HeapPerCall)/1024, (r.StackPerCall-base.StackPerCall)/1024,
				(r.RSSPerCall-base.RSSPerCall)/1024, r.Goroutines-base.Goroutines)
		}
	}
	var failed []string
	for _, r := range rows {
		if r.Errors > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d streams failed (first: %v)", r.Server, r.Errors, r.FirstError))
		}
		if r.LeftOver > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d goroutines left running after the release", r.Server, r.LeftOver))
		}
	}
	if failed != nil {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// raiseFileLimit lifts this process's open-file limit to its hard limit;
// the server, its child, inherits it. A connection is one descriptor, so
// the defaults suffice unless --conns is raised past them.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// measure starts the server name, holds o.calls streams on it, releases
// them and returns its figures.
func measure(ctx context.Context, o options, name string) (row, error) {
	r := row{Server: name, Calls: o.calls}
	srv, err := startServer(ctx, o, name)
	if err != nil {
		return r, err
	}
	defer srv.stop()

	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range o.conns {
		c, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return r, err
		}
		c.Connect()
		conns = append(conns, c)
	}
	// Warm up: the server's pools and every connection, held and released
	// once, so the baseline holds what serving costs anyway.
	warm, err := hold(ctx, srv, name, conns, len(conns)*4, o.opening)
	if err == nil {
		err = srv.release()
	}
	if err != nil {
		return r, fmt.Errorf("warming up: %w", err)
	}
	warm.wg.Wait()
	if err := warm.firstError(); err != nil {
		return r, fmt.Errorf("warming up: %w", err)
	}
	before, err := srv.stats(o.settle)
	if err != nil {
		return r, err
	}

	h, err := hold(ctx, srv, name, conns, o.calls, o.opening)
	if err != nil {
		return r, err
	}
	r.Open, r.Errors, r.FirstError = h.open, h.errors.Load(), h.firstError()
	if r.Errors == 0 {
		if o.heapProfile {
			if err := srv.ask("heap", "heap <nil>"); err != nil {
				return r, err
			}
		}
		during, err := srv.stats(o.settle)
		if err != nil {
			return r, err
		}
		n := float64(o.calls)
		r.HeapPerCall = float64(during.Heap-before.Heap) / n
		r.StackPerCall = float64(during.Stacks-before.Stacks) / n
		r.GoPerCall = r.HeapPerCall + r.StackPerCall
		r.RSSPerCall = float64(during.RSS-before.RSS) / n
		r.Goroutines = float64(during.Goroutines-before.Goroutines) / n
	}
	start := time.Now()
	if err := srv.release(); err != nil {
		return r, err
	}
	h.wg.Wait()
	r.Release = time.Since(start)
	r.Errors, r.FirstError = h.errors.Load(), h.firstError()
	after, err := srv.stats(0)
	if err != nil {
		return r, err
	}
	// A stream's handler may still be returning on the server when its
	// client has read the end, and toolwire's runners stay idle for 10 s
	// before they exit: wait up to 20 s for the goroutines to go back.
	for i := 0; after.Goroutines > before.Goroutines && i < 200; i++ {
		time.Sleep(100 * time.Millisecond)
		if after, err = srv.stats(0); err != nil {
			return r, err
		}
	}
	r.LeftOver = max(0, after.Goroutines-before.Goroutines)
	return r, nil
}

// held is a set of held streams: their clients wait, each on a goroutine
// of wg, for the rest of their stream once released.
type held struct {
	wg     sync.WaitGroup
	open   time.Duration // from the first stream opened to the last one held
	errors atomic.Int64
	first  atomic.Pointer[error]
}

func (h *held) fail(err error) {
	h.errors.Add(1)
	h.first.CompareAndSwap(nil, &err)
}

func (h *held) firstError() error {
	if p := h.first.Load(); p != nil {
		return *p
	}
	return nil
}

// hold opens n streams over conns, opening at most opening at once, and
// returns once each is held on the server (or has failed). Released, each
// stream's client checks the rest of it.
func hold(ctx context.Context, srv *server, name string, conns []*grpc.ClientConn, n, opening int) (*held, error) {
	h := &held{}
	sem := make(chan struct{}, opening)
	var heldWG sync.WaitGroup
	start := time.Now()
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		conn := conns[i%len(conns)]
		heldWG.Add(1)
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			once := sync.OnceFunc(func() { <-sem; heldWG.Done() })
			defer once()
			var err error
			if name == "toolwire" {
				err = holdToolwire(ctx, conn, once)
			} else {
				err = holdGRPC(ctx, conn, once)
			}
			if err != nil {
				h.fail(err)
			}
		}()
	}
	heldWG.Wait()
	h.open = time.Since(start)
	if h.errors.Load() > 0 {
		return h, nil
	}
	// The clients have seen each call start; wait until the server has
	// every one inside its handler.
	for {
		st, err := srv.stats(0)
		if err != nil {
			return nil, err
		}
		if st.Held >= int64(n) {
			return h, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdToolwire runs a one-call batch of hold, calling held once its call
// has started, and checks that it ends with a result that is no error and
// BatchFinished, once released.
func holdToolwire(ctx context.Context, conn *grpc.ClientConn, held func()) error {
	stream, err := toolwirev1.NewToolServiceClient(conn).ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: holdTool}},
	})
	if err != nil {
		return err
	}
	var started, finished bool
	var result *toolwirev1.CallResult
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		switch {
		case ev.GetStarted() != nil:
			started = true
			held()
		case ev.GetResult() != nil:
			result = ev.GetResult()
		case ev.GetFinished() != nil:
			finished = true
		}
	}
	switch {
	case !started:
		return errors.New("the stream ended without CallStarted")
	case result == nil:
		return errors.New("the stream ended without a result")
	case result.GetIsError():
		return fmt.Errorf("the call failed: %v", result.GetContent())
	case !finished:
		return errors.New("the stream ended without BatchFinished")
	}
	return nil
}

// holdGRPC runs the bare server's stream: one message, held, then one more
// and the end.
func holdGRPC(ctx context.Context, conn *grpc.ClientConn, held func()) error {
	stream, err := testpb.NewTestServiceClient(conn).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		return err
	}
	got := 0
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if got++; got == 1 {
			held()
		}
	}
	if got != 2 {
		return fmt.Errorf("the stream sent %d messages, not 2", got)
	}
	return nil
}

// server is the measured server, this command run again with --serve.
type server struct {
	cmd  *exec.Cmd
	addr string
	in   io.WriteCloser
	out  *bufio.Scanner
	mu   sync.Mutex // one request at a time on in and out
}

func startServer(ctx context.Context, o options, name string) (*server, error) {
	calls := o.calls
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"--serve", name, "--calls", fmt.Sprint(calls)}
	if o.heapProfile {
		// Every allocation sampled: the profile shows what one call keeps.
		args = append(args, "--memprofilerate", "1")
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	s := &server{cmd: cmd}
	if s.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.out = bufio.NewScanner(stdout)
	line, err := s.readLine()
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("the server did not start: %w", err)
	}
	var ok bool
	if s.addr, ok = strings.CutPrefix(line, "listening "); !ok {
		s.stop()
		return nil, fmt.Errorf("the server said %q", line)
	}
	return s, nil
}

func (s *server) readLine() (string, error) {
	if !s.out.Scan() {
		if err := s.out.Err(); err != nil {
			return "", err
		}
		return "", io.ErrUnexpectedEOF
	}
	return s.out.Text(), nil
}

// stats are the server's figures, as its "stats" answers them.
type stats struct {
	Heap       uint64 // live heap after a collection (HeapAlloc)
	Stacks     uint64 // goroutine stacks (StackInuse)
	Goroutines int
	Held       int64 // calls inside their handler, held
	RSS        int64 // read by the client, from /proc
}

// stats asks the server for its figures; with settle > 0 it first waits
// for the server's RSS to hold still for settle.
func (s *server) stats(settle time.Duration) (stats, error) {
	var rss int64
	if settle > 0 {
		rss = proc.SettledRSS(s.cmd.Process.Pid, settle)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := io.WriteString(s.in, "stats\n"); err != nil {
		return stats{}, err
	}
	line, err := s.readLine()
	if err != nil {
		return stats{}, err
	}
	var st stats
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		return stats{}, fmt.Errorf("the server's stats %q: %w", line, err)
	}
	if settle > 0 {
		st.RSS = rss
	} else {
		st.RSS = proc.RSS(s.cmd.Process.Pid)
	}
	return st, nil
}

// release makes every held call return.
func (s *server) release() error { return s.ask("release", "released") }

// ask sends the server req and expects want.
func (s *server) ask(req, want string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := io.WriteString(s.in, req+"\n"); err != nil {
		return err
	}
	line, err := s.readLine()
	if err == nil && line != want {
		err = fmt.Errorf("the server said %q to %s", line, req)
	}
	return err
}

// stop closes the server's stdin, on which it stops, and waits for it.
func (s *server) stop() {
	s.in.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}
