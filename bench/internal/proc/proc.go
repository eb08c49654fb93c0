// Package proc measures a server process from outside, for the bench
// commands that start a real toolwire serve (bench/stalled,
// bench/mcpsessions): its resident set size from /proc, its metrics from
// the admin port, and stopping it.
package proc

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// RSS is the resident set size of process pid, from /proc; 0 if unknown.
func RSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// SettledRSS waits until process pid's RSS holds within 2% for d (at
// most 20 d) and returns it.
func SettledRSS(pid int, d time.Duration) int64 {
	deadline := time.Now().Add(20 * d)
	last, since := RSS(pid), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(d / 10)
		now := RSS(pid)
		if diff := now - last; diff > last/50 || -diff > last/50 {
			last, since = now, time.Now()
			continue
		}
		if time.Since(since) >= d {
			return now
		}
	}
	return RSS(pid)
}

// Metric is the value of the Prometheus metric name on the admin port
// admin (host:port), summed over its labels; "n/a" if it has none.
func Metric(admin, name string) string {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return "n/a"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	found := false
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return "n/a"
	}
	return strconv.FormatFloat(sum, 'f', -1, 64)
}

// Stop interrupts cmd, kills it if it has not exited (done closed) within
// 10 s, and waits for it.
func Stop(cmd *exec.Cmd, done <-chan struct{}) {
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
	}
	cmd.Wait()
}
