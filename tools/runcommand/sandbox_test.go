package runcommand_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testenv"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// newSandbox returns a sandbox that enforces every restriction, or reports
// the kernel's lack of one as missing.
func newSandbox(tb testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	tb.Helper()
	cfg.Mode = sandbox.Required
	sb, _, err := sandbox.New(cfg)
	if err != nil {
		testenv.Missing(tb, "a kernel sandbox ("+err.Error()+")")
	}
	return sb
}

func TestSandboxSmoke(t *testing.T) {
	t.Parallel()
	c := wt.NewCorpus(t)
	tool := runcommand.New(c.WS, runcommand.Options{Shell: true, Sandbox: newSandbox(t, sandbox.Config{MemoryBytes: 256 << 20})})
	for _, cmd := range []string{
		`echo hello; pwd; echo $TMPDIR; echo x > $TMPDIR/a && cat $TMPDIR/a; echo y > f && cat f`,
		fmt.Sprintf("grep -a Landlock /proc/%d/status; head -c 30 /proc/%d/environ; echo; head -c 30 /proc/%d/environ; echo; grep -a Landlock /proc/self/status", os.Getpid(), os.Getpid(), os.Getppid()),
		`cat /proc/1/environ | head -c 50; echo; head -c 10 /proc/1/mem; ls /proc/1/fd | head -3; grep Seccomp /proc/self/status; cat /proc/self/attr/current 2>&1; kill -CONT 1`,
		`cat ../ws-other/secret.txt`,
		`kill -9 $PPID`,
		`sleep 3333 & echo started`,
		`python3 -c 'import socket; socket.create_connection(("127.0.0.1", 22))'`,
	} {
		res := wt.Call(t, tool, `{"command":`+wt.Quote(cmd)+`}`)
		t.Logf("%s\n→ error %v\n%s\n%s", cmd, res.IsError, wt.Text(res), res.Details)
	}
}

// BenchmarkSandboxOverhead measures what the sandbox adds to one command:
// 500 runs of true through run_command, sandboxed and off, in the same
// process, reported as p50/p99 of each and the ratio of the p50s.
func BenchmarkSandboxOverhead(b *testing.B) {
	e := wt.New(b, nil)
	sb := newSandbox(b, sandbox.Config{})
	off := runcommand.New(e.WS, runcommand.Options{})
	on := runcommand.New(e.WS, runcommand.Options{Sandbox: sb})
	const runs = 500
	measure := func(tool tools.Tool, n int) []time.Duration {
		d := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if res := wt.Call(b, tool, `{"argv":["true"]}`); res.IsError {
				b.Fatalf("true failed: %s", wt.Text(res))
			}
			d = append(d, time.Since(start))
		}
		return d
	}
	for b.Loop() {
		// Interleaved halves, so drift in the machine's load hits both.
		var offD, onD []time.Duration
		for range 2 {
			offD = append(offD, measure(off, runs/2)...)
			onD = append(onD, measure(on, runs/2)...)
		}
		slices.Sort(offD)
		slices.Sort(onD)
		pct := func(d []time.Duration, p int) float64 { return float64(d[len(d)*p/100].Microseconds()) / 1000 }
		b.ReportMetric(pct(offD, 50), "off-p50-ms")
		b.ReportMetric(pct(offD, 99), "off-p99-ms")
		b.ReportMetric(pct(onD, 50), "sandbox-p50-ms")
		b.ReportMetric(pct(onD, 99), "sandbox-p99-ms")
		b.ReportMetric(pct(onD, 50)-pct(offD, 50), "added-p50-ms")
		b.ReportMetric(pct(onD, 50)/pct(offD, 50), "p50-ratio")
	}
}
