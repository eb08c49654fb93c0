// Command sandboxcost measures what run_command's sandbox adds to a command
// where users see it: through a real "toolwire serve" (issue 30). For each
// binary it is given, it starts two servers alike but for the sandbox, one
// with --sandbox off and one with the sandbox required (with
// sandbox.accept: [owner_files], since the servers share one workspace),
// and then runs rounds: in each, every server gets one batch of --calls
// sequential run_command ["true"] calls, in turn, so the noise of a shared
// machine falls on all of them. A call's time is the duration its result
// reports (the server's own measure of the call, the same chain every
// surface takes). It reports p10, p50 and p90 of each server's calls, what
// the sandbox adds at each (required minus off, same binary), and, with
// two binaries, the ratio of the added p50s.
//
//	go build -o /tmp/toolwire ./cmd/toolwire
//	go run ./bench/sandboxcost --toolwire now=/tmp/toolwire
//	go run ./bench/sandboxcost --toolwire before=/tmp/toolwire-old --toolwire after=/tmp/toolwire --rounds 20
//
// Arguments after -- go to every server's "toolwire serve".
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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxcost:", err)
		os.Exit(1)
	}
}

// binaries is the repeated --toolwire name=path flag.
type binaries [][2]string

func (b *binaries) String() string { return fmt.Sprint(*b) }

func (b *binaries) Set(s string) error {
	name, path, ok := strings.Cut(s, "=")
	if !ok {
		name, path = filepath.Base(s), s
	}
	*b = append(*b, [2]string{name, path})
	return nil
}

type options struct {
	bins      binaries
	rounds    int
	calls     int
	warmup    int
	serveArgs []string
}

func parseArgs(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("sandboxcost", flag.ContinueOnError)
	fs.Var(&o.bins, "toolwire", "`name=binary` of a toolwire to measure (repeat to compare binaries in one run)")
	fs.IntVar(&o.rounds, "rounds", 10, "rounds; each runs one batch on every server")
	fs.IntVar(&o.calls, "calls", 100, "sequential run_command calls in each batch")
	fs.IntVar(&o.warmup, "warmup", 1, "rounds run first and not counted")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if len(o.bins) == 0 {
		return o, errors.New("--toolwire is required")
	}
	o.serveArgs = fs.Args()
	return o, nil
}

// server is one "toolwire serve" process and a client of it.
type server struct {
	name string
	cmd  *exec.Cmd
	c    *client.Client
	done chan struct{}
	ms   []float64 // the calls' durations, in milliseconds
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseArgs(args)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sandboxcost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	config := filepath.Join(dir, "required.yaml")
	if err := os.WriteFile(config, []byte("sandbox:\n  mode: required\n  accept: [owner_files]\n"), 0o644); err != nil {
		return err
	}
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for _, b := range o.bins {
		for _, mode := range []string{"off", "required"} {
			extra := []string{"--sandbox", "off"}
			if mode == "required" {
				extra = []string{"--config", config}
			}
			s, err := start(ctx, b[0]+"/"+mode, b[1], append(append([]string{"--workspace", ws}, extra...), o.serveArgs...))
			if err != nil {
				return err
			}
			servers = append(servers, s)
		}
	}
	fmt.Fprintf(out, "%d rounds (and %d warm-up) of %d sequential run_command [\"true\"] calls per server; load average at start %s\n", o.rounds, o.warmup, o.calls, loadavg())
	for r := range o.warmup + o.rounds {
		for _, s := range servers {
			ms, err := s.batch(ctx, o.calls)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if r >= o.warmup {
				s.ms = append(s.ms, ms...)
			}
		}
	}
	fmt.Fprintf(out, "load average at the end %s\n\n", loadavg())
	fmt.Fprintf(out, "%-24s %8s %8s %8s\n", "server (ms per call)", "p10", "p50", "p90")
	for _, s := range servers {
		p := percentiles(s.ms)
		fmt.Fprintf(out, "%-24s %8.2f %8.2f %8.2f\n", s.name, p[0], p[1], p[2])
	}
	fmt.Fprintf(out, "\n%-24s %8s %8s %8s\n", "added by the sandbox", "p10", "p50", "p90")
	var added [][3]float64
	for i := 0; i+1 < len(servers); i += 2 {
		off, req := percentiles(servers[i].ms), percentiles(servers[i+1].ms)
		a := [3]float64{req[0] - off[0], req[1] - off[1], req[2] - off[2]}
		added = append(added, a)
		fmt.Fprintf(out, "%-24s %8.2f %8.2f %8.2f\n", o.bins[i/2][0], a[0], a[1], a[2])
	}
	for i := 1; i < len(added); i++ {
		fmt.Fprintf(out, "added p50 %s / %s: %.2f; added p90: %.2f\n", o.bins[i][0], o.bins[0][0], added[i][1]/added[0][1], added[i][2]/added[0][2])
	}
	return nil
}

// percentiles returns p10, p50 and p90 of ms.
func percentiles(ms []float64) [3]float64 {
	if len(ms) == 0 {
		return [3]float64{}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	at := func(p int) float64 { return s[min(len(s)*p/100, len(s)-1)] }
	return [3]float64{at(10), at(50), at(90)}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// batch runs one batch of n sequential run_command ["true"] calls and
// returns each call's duration as its result reports it.
func (s *server) batch(ctx context.Context, n int) ([]float64, error) {
	req := &toolwirev1.ExecuteBatchRequest{}
	for i := range n {
		req.Calls = append(req.Calls, client.Call("c"+strconv.Itoa(i), "run_command", map[string]any{"argv": []string{"true"}}))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	b, err := client.Collect(s.c.ExecuteBatch(ctx, req))
	if err != nil {
		return nil, err
	}
	ms := make([]float64, 0, n)
	for _, r := range b.Results {
		if r.GetIsError() {
			return nil, fmt.Errorf("a call failed: %s", client.Text(r))
		}
		ms = append(ms, float64(r.GetDuration().AsDuration().Microseconds())/1000)
	}
	return ms, nil
}

func start(ctx context.Context, name, bin string, extra []string) (*server, error) {
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--run-command"}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{name: name, cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Level, Msg, Addr string
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch {
			case line.Addr != "" && strings.HasPrefix(line.Msg, "toolwire listening"):
				select {
				case addr <- line.Addr:
				default:
				}
			case line.Level == "ERROR":
				fmt.Fprintln(os.Stderr, name+":", sc.Text())
			}
		}
	}()
	select {
	case a := <-addr:
		if s.c, err = client.New(a); err != nil {
			s.stop()
			return nil, err
		}
		return s, nil
	case <-s.done:
		cmd.Wait()
		return nil, fmt.Errorf("%s (%s) exited before listening: %v", name, bin, cmd.ProcessState)
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s did not say where it listens within 30s", name)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

func (s *server) stop() {
	if s.c != nil {
		s.c.Close()
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
	}
	s.cmd.Wait()
}
