// Command crossreplica measures, from outside, how long a cancel or an
// approval sent to one replica takes to reach a batch running on another
// (issue 32). It starts a redis-server of its own (redis-server on PATH,
// on a free loopback port) and, for each binary it is given, two real
// "toolwire serve"s sharing it, A and B. Each trial sends A a detached
// batch and, once the batch waits (a sleep call running, or an echo call
// held for approval), asks B to cancel it or approve the call; the time
// measured runs from that request's start to the moment A's stream
// delivers the call's result. The binaries take turns trial by trial,
// so the noise of a shared machine falls on each alike. It reports p50,
// p99 and the largest time of each binary and kind, and the ratios.
//
//	git stash; go build -o /tmp/tw-before ./cmd/toolwire; git stash pop   # or main's binary
//	go build -o /tmp/tw-after ./cmd/toolwire
//	go run ./bench/crossreplica --before /tmp/tw-before --after /tmp/tw-after --trials 200
//
// With only --after, the one binary is measured. The client is this
// process: A's and B's are the binary's own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolwire/toolwire/bench/internal/proc"
	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "crossreplica:", err)
		os.Exit(1)
	}
}

// config holds echo for approval; sleep runs.
const config = `approvals:
  - tools: ["echo"]
    reason: "crossreplica holds echo"
`

// system is one binary's pair of replicas.
type system struct {
	name   string
	a, b   *server
	ca, cb *client.Client
	took   map[string][]time.Duration // by kind
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("crossreplica", flag.ContinueOnError)
	before := fs.String("before", "", "the toolwire `binary` to compare against (main's); none: measure --after alone")
	after := fs.String("after", "", "the toolwire `binary` to measure (required)")
	trials := fs.Int("trials", 100, "cancels and approvals measured per binary, each")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *after == "" {
		return errors.New("--after is required")
	}
	dir, err := os.MkdirTemp("", "crossreplica")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "toolwire.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		return err
	}
	redisAddr, stopRedis, err := startRedis(dir)
	if err != nil {
		return err
	}
	defer stopRedis()

	bins := [][2]string{{"after", *after}}
	if *before != "" {
		bins = [][2]string{{"before", *before}, {"after", *after}}
	}
	var systems []*system
	defer func() {
		for _, s := range systems {
			s.stop()
		}
	}()
	for _, b := range bins {
		s := &system{name: b[0], took: map[string][]time.Duration{}}
		systems = append(systems, s)
		for _, r := range []**server{&s.a, &s.b} {
			*r, err = startServer(ctx, b[1], redisAddr, cfg, filepath.Join(dir, fmt.Sprintf("%s-%p.log", b[0], r)))
			if err != nil {
				return fmt.Errorf("%s: %w", b[0], err)
			}
		}
		if s.ca, err = client.New(s.a.addr); err != nil {
			return err
		}
		if s.cb, err = client.New(s.b.addr); err != nil {
			return err
		}
	}
	kinds := []string{"cancel", "approve"}
	for i := range *trials {
		for j := range systems {
			s := systems[(i+j)%len(systems)] // each goes first in turn
			for _, kind := range kinds {
				d, err := s.trial(ctx, kind)
				if err != nil {
					return fmt.Errorf("%s, %s trial %d: %w", s.name, kind, i, err)
				}
				s.took[kind] = append(s.took[kind], d)
			}
		}
	}

	fmt.Fprintf(out, "cancel or approve through replica B of a detached batch on replica A, two real serves on one real redis-server, %d trials each\n\n", *trials)
	fmt.Fprintf(out, "%-8s %-8s %10s %10s %10s\n", "binary", "kind", "p50", "p99", "max")
	for _, kind := range kinds {
		for _, s := range systems {
			p50, p99, mx := quantiles(s.took[kind])
			fmt.Fprintf(out, "%-8s %-8s %10s %10s %10s\n", s.name, kind, round(p50), round(p99), round(mx))
		}
	}
	if len(systems) == 2 {
		fmt.Fprintln(out)
		for _, kind := range kinds {
			b50, b99, _ := quantiles(systems[0].took[kind])
			a50, a99, _ := quantiles(systems[1].took[kind])
			fmt.Fprintf(out, "%-8s after/before: p50 %.3f×, p99 %.3f×\n", kind, float64(a50)/float64(b50), float64(a99)/float64(b99))
		}
	}
	return nil
}

// trial sends A a detached batch that waits, asks B to cancel it or
// approve its call, and returns how long from that request to the call's
// result on A's stream.
func (s *system) trial(ctx context.Context, kind string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c := client.Call("c", "sleep", map[string]int{"ms": 600_000})
	if kind == "approve" {
		c = client.Call("c", "echo", map[string]string{"text": "approved on B"})
	}
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{c}, Options: &toolwirev1.BatchOptions{Detach: true}}
	var id string
	var t0 time.Time
	for ev, err := range s.ca.ExecuteBatch(ctx, req) {
		if err != nil {
			return 0, err
		}
		switch {
		case ev.GetAccepted() != nil:
			id = ev.GetAccepted().GetBatchId()
		case kind == "cancel" && ev.GetStarted() != nil, kind == "approve" && ev.GetAwaitingApproval() != nil:
			t0 = time.Now()
			var err error
			if kind == "cancel" {
				_, err = s.cb.ToolService().CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: id, Reason: "crossreplica"})
			} else {
				_, err = s.cb.ToolService().ResolveApproval(ctx, &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: "c", Approved: true})
			}
			if err != nil {
				return 0, fmt.Errorf("through B: %w", err)
			}
		case ev.GetResult() != nil:
			d := time.Since(t0)
			r := ev.GetResult()
			want := toolwirev1.ErrorKind_ERROR_KIND_CANCELLED
			if kind == "approve" {
				want = toolwirev1.ErrorKind_ERROR_KIND_UNSPECIFIED
			}
			if t0.IsZero() || r.GetErrorKind() != want {
				return 0, fmt.Errorf("result %v before B was asked, or not what B asked for", r)
			}
			return d, nil
		}
	}
	return 0, errors.New("the batch ended without its call's result")
}

func (s *system) stop() {
	for _, c := range []*client.Client{s.ca, s.cb} {
		if c != nil {
			c.Close()
		}
	}
	for _, r := range []*server{s.a, s.b} {
		if r != nil {
			proc.Stop(r.cmd, r.done)
		}
	}
}

// quantiles returns the p50, p99 and largest of ds.
func quantiles(ds []time.Duration) (p50, p99, mx time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99), s[len(s)-1]
}

func round(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// server is a "toolwire serve" child process.
type server struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

func startServer(ctx context.Context, bin, redisAddr, cfg, logPath string) (*server, error) {
	cmd := exec.Command(bin, "serve", "--diag", "--listen", "127.0.0.1:0", "--no-workspace", "--log-format", "json",
		"--store", "redis://"+redisAddr+"/0", "--config", cfg)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f, err := os.Create(logPath)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		defer close(s.done)
		defer f.Close()
		sc := bufio.NewScanner(io.TeeReader(stderr, f))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Addr != "" {
				select {
				case ready <- line.Addr:
				default:
				}
			}
		}
	}()
	select {
	case s.addr = <-ready:
		return s, nil
	case <-s.done:
		cmd.Wait()
		return nil, fmt.Errorf("%s exited before listening (%v); its log: %s", bin, cmd.ProcessState, logPath)
	case <-time.After(30 * time.Second):
		proc.Stop(cmd, s.done)
		return nil, errors.New("the server did not say where it listens within 30s")
	case <-ctx.Done():
		proc.Stop(cmd, s.done)
		return nil, ctx.Err()
	}
}

// startRedis starts a redis-server on a free loopback port, keeping
// nothing on disk, and returns its address and how to stop it.
func startRedis(dir string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("redis-server: %w", err)
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; ; i++ {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return addr, stop, nil
			}
		}
		if i == 200 {
			stop()
			return "", nil, errors.New("redis-server did not answer PING within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
