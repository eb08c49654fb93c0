// Command mcpsessions measures, from outside, what MCP sessions that are
// opened and never closed cost a real "toolwire serve" (issue 27). It
// starts the binary it is given with an HTTP port, opens --sessions
// 2025-11-25 sessions (an initialize each, over a few keep-alive
// connections, as clients that never send DELETE), and reports the
// server's RSS (from /proc) and goroutines (go_goroutines, from its admin
// listener) before, after each tenth of the sessions, and once settled;
// then whether the first session still answers and a new one opens.
//
//	go build -o /tmp/toolwire ./cmd/toolwire
//	go run ./bench/mcpsessions --toolwire /tmp/toolwire --sessions 20000
//
// Arguments after -- go to "toolwire serve" (--mcp-max-sessions-per-caller
// and the like). Every session is opened by the anonymous caller.
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/bench/internal/proc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mcpsessions:", err)
		os.Exit(1)
	}
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpsessions","version":"1"}}}`

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("mcpsessions", flag.ContinueOnError)
	bin := fs.String("toolwire", "", "the toolwire `binary` to measure (required)")
	n := fs.Int("sessions", 20000, "sessions to open")
	workers := fs.Int("workers", 8, "clients opening sessions at once, each on a keep-alive connection")
	settle := fs.Duration("settle", 3*time.Second, "how long RSS must hold still (within 2%) before it is read, at most 20 times this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" {
		return errors.New("--toolwire is required")
	}
	s, err := start(ctx, *bin, fs.Args())
	if err != nil {
		return err
	}
	defer s.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *workers}}
	open := func() (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.http+"/mcp", strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if id := resp.Header.Get("Mcp-Session-Id"); resp.StatusCode == http.StatusOK && id != "" {
			return id, nil
		}
		return "", fmt.Errorf("initialize: %s %s", resp.Status, strings.TrimSpace(string(b)))
	}
	// Warm up: one session, closed, so the baseline holds what serving
	// costs anyway.
	first, err := open()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%8s %10s %10s\n", "sessions", "RSS MB", "goroutines")
	report := func(k int, rss int64) {
		fmt.Fprintf(out, "%8d %10.0f %10s\n", k, mb(rss), s.metric("go_goroutines"))
	}
	base := s.settledRSS(*settle)
	report(1, base)
	var opened, refused atomic.Int64
	var firstErr atomic.Value
	step := max(*n/10, 1)
	for done := 1; done < *n; {
		batch := min(step, *n-done)
		var wg sync.WaitGroup
		var next atomic.Int64
		for range *workers {
			wg.Go(func() {
				for next.Add(1) <= int64(batch) {
					if _, err := open(); err != nil {
						refused.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					opened.Add(1)
				}
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return err
		}
		done += batch
		report(done, s.rss())
	}
	settled := s.settledRSS(*settle)
	fmt.Fprintf(out, "settled: RSS %.0f MB (%+.0f MB over one session), goroutines %s\n", mb(settled), mb(settled-base), s.metric("go_goroutines"))
	fmt.Fprintf(out, "opened %d, refused %d (first: %v)\n", opened.Load()+1, refused.Load(), firstErr.Load())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.http+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", first)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if resp, err := client.Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(out, "the first session: %s %s\n", resp.Status, strings.TrimSpace(string(b)))
	}
	if _, err := open(); err != nil {
		fmt.Fprintf(out, "a new session: %v\n", err)
	} else {
		fmt.Fprintln(out, "a new session: opened")
	}
	return nil
}

// server is one "toolwire serve" process.
type server struct {
	cmd   *exec.Cmd
	http  string
	admin string
	done  chan struct{}
}

func start(ctx context.Context, bin string, extra []string) (*server, error) {
	args := append([]string{"serve", "--diag", "--no-workspace", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--log-format", "json"}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
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
			case strings.HasPrefix(line.Msg, "toolwire listening"):
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.done:
		cmd.Wait()
		return nil, fmt.Errorf("%s exited before listening: %v", bin, cmd.ProcessState)
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

// metric returns a Prometheus gauge's value from the admin listener, or
// "n/a".
func (s *server) metric(name string) string { return proc.Metric(s.admin, name) }

func mb(n int64) float64 { return float64(n) / 1e6 }
