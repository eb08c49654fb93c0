package runcommand_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// BenchmarkLimitOvershoot measures how far past an aggregate limit a
// command's tree gets before the watchdog ends it (docs/security.md, "What
// the watchdog bounds"): files written as fast as dd writes them against
// max_workspace_bytes 128 MiB (the bytes left in the workspace when the
// call returns), the same in memfds (the peak a sampler outside saw), and,
// as root (whom RLIMIT_NPROC does not bind), processes started in a loop
// against max_processes 100 (the most alive at once that a sampler saw).
// Reported as ratios to the limit; the tests assert no timing.
func BenchmarkLimitOvershoot(b *testing.B) {
	testenv.LookPath(b, "python3")
	for b.Loop() {
		e := wt.New(b, nil)
		sb := newSandbox(b, sandbox.Config{MaxWorkspaceBytes: 128 << 20, MaxFileBytes: 4 << 30, MaxProcesses: 100})
		tool := runcommand.New(e.WS, runcommand.Options{Shell: true, Sandbox: sb})
		res := wt.Call(b, tool, `{"command":"for i in $(seq 64); do dd if=/dev/zero of=f$i bs=1M count=64 2>/dev/null; done"}`)
		if !strings.Contains(wt.Text(res), "max_workspace_bytes") {
			b.Fatalf("the writer was not ended: %s", wt.Text(res))
		}
		b.ReportMetric(float64(du(b, e.Dir))/float64(128<<20), "disk-x-limit")
		empty(b, e.Dir)

		peak := sample(func() int64 { return memfdBytes() }, func() {
			call(b, tool, "max_workspace_bytes", `{"command":"python3 -c 'import os\nfds=[]\nwhile True:\n  fd=os.memfd_create(\"toolwire-overshoot\")\n  os.write(fd, b\"\\1\" * (16 << 20))\n  fds.append(fd)'"}`)
		})
		b.ReportMetric(float64(peak)/float64(128<<20), "memfd-x-limit")

		if os.Getuid() == 0 {
			marker := "7" + strconv.Itoa(os.Getpid()%1000)
			peak := sample(func() int64 { return int64(len(testenv.Processes("sleep\x00" + marker))) }, func() {
				call(b, tool, "", `{"command":"while :; do sleep `+marker+` & done"}`)
			})
			b.ReportMetric(float64(peak)/100, "processes-x-limit")
		}
	}
}

// call runs a command that the sandbox must end: its result names limit
// ("": any).
func call(tb testing.TB, tool tools.Tool, limit, args string) {
	tb.Helper()
	res := wt.Call(tb, tool, args)
	if text := wt.Text(res); !res.IsError || !strings.Contains(text, limit) {
		tb.Fatalf("result:\n%s\nwant an error naming %q", text, limit)
	}
}

// empty removes what dir holds.
func empty(tb testing.TB, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			tb.Fatal(err)
		}
	}
}

// sample runs f while it samples value every millisecond, and returns the
// largest value it saw.
func sample(value func() int64, f func()) int64 {
	var peak int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			peak = max(peak, value())
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	return peak
}

// memfdBytes adds up the memfds named toolwire-overshoot that any process
// holds.
func memfdBytes() int64 {
	var n int64
	seen := map[uint64]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if l, err := os.Readlink(fd); err != nil || !strings.Contains(l, "memfd:toolwire-overshoot") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(fd, &st) == nil && !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Blocks * 512
		}
	}
	return n
}

// du is the bytes allocated under dir.
func du(tb testing.TB, dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			if info, err := d.Info(); err == nil {
				n += info.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	return n
}

// BenchmarkMediatedWork measures what the supervisor's mediation adds to
// work that makes many mediated calls: starting processes (every clone
// is counted), removing files (every unlink is performed for the
// command), renaming files over others and changing modes; each sandboxed
// and off, alternated in one process, as milliseconds per command and the
// ratio of the medians.
func BenchmarkMediatedWork(b *testing.B) {
	e := wt.New(b, nil)
	sb := newSandbox(b, sandbox.Config{})
	off := runcommand.New(e.WS, runcommand.Options{Shell: true})
	on := runcommand.New(e.WS, runcommand.Options{Shell: true, Sandbox: sb})
	work := []struct{ name, command string }{
		{"fork-exec-200", `for i in $(seq 200); do /bin/true; done`},
		{"unlink-2000", `mkdir d && cd d && seq 2000 | xargs touch && cd .. && rm -r d`},
		{"rename-2000", `python3 -c 'import os
for i in range(2000):
    open("t", "w").close()
    os.replace("t", "f")
os.unlink("f")'`},
		{"chmod-2000", `python3 -c 'import os
open("m", "w").close()
for i in range(2000):
    os.chmod("m", 0o600 | (i & 0o44))
os.unlink("m")'`},
	}
	const runs = 5
	timed := func(tool tools.Tool, command string) time.Duration {
		start := time.Now()
		if res := wt.Call(b, tool, `{"command":`+wt.Quote(command)+`}`); res.IsError {
			b.Fatalf("%s: %s", command, wt.Text(res))
		}
		return time.Since(start)
	}
	for b.Loop() {
		for _, w := range work {
			var offD, onD []time.Duration
			for range runs {
				offD = append(offD, timed(off, w.command))
				onD = append(onD, timed(on, w.command))
			}
			slices.Sort(offD)
			slices.Sort(onD)
			b.ReportMetric(float64(offD[runs/2].Microseconds())/1000, w.name+"-off-ms")
			b.ReportMetric(float64(onD[runs/2].Microseconds())/1000, w.name+"-sandbox-ms")
			b.ReportMetric(float64(onD[runs/2])/float64(offD[runs/2]), w.name+"-ratio")
		}
	}
}
