package runcommand_test

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// BenchmarkCancelLatency measures how long run_command takes to return once
// its call's context ends, for a running command (sleep) and for one whose
// child ignores SIGTERM, sandboxed and off, alternated in one process. The
// service abandons a built-in that takes longer than its abandon grace
// (100 ms in internal/testing/e2e's cancellation test); this is that figure's
// measurement, which tests do not time.
func BenchmarkCancelLatency(b *testing.B) {
	e := wt.New(b, nil)
	sb := newSandbox(b, sandbox.Config{})
	cases := []struct {
		name   string
		tool   tools.Tool
		script string
	}{
		{"off/sleep", runcommand.New(e.WS, runcommand.Options{}), `echo up; exec sleep 60`},
		{"off/ignores-TERM", runcommand.New(e.WS, runcommand.Options{}), `trap '' TERM; echo up; sleep 60`},
		{"sandbox/sleep", runcommand.New(e.WS, runcommand.Options{Sandbox: sb}), `echo up; exec sleep 60`},
		{"sandbox/ignores-TERM", runcommand.New(e.WS, runcommand.Options{Sandbox: sb}), `trap '' TERM; echo up; sleep 60`},
	}
	const runs = 20
	before := runtime.NumGoroutine()
	defer func() {
		// The last commands' ends go on in the background (a kill grace of
		// 1 s for those ignoring SIGTERM); let them finish before goleak looks.
		for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	for b.Loop() {
		lat := make([][]time.Duration, len(cases))
		for range runs {
			for i, c := range cases {
				lat[i] = append(lat[i], cancelOnce(b, c.tool, c.script))
			}
		}
		for i, c := range cases {
			slices.Sort(lat[i])
			b.ReportMetric(float64(lat[i][len(lat[i])/2].Microseconds())/1000, c.name+"-p50-ms")
			b.ReportMetric(float64(lat[i][len(lat[i])-1].Microseconds())/1000, c.name+"-max-ms")
		}
	}
}

// cancelOnce starts script, cancels the call once it has printed, and
// returns the time from the cancellation to the tool's return.
func cancelOnce(tb testing.TB, tool tools.Tool, script string) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder()
	done := make(chan time.Time, 1)
	go func() {
		_, _ = wt.CallContext(ctx, tb, tool, `{"argv":["sh","-c",`+wt.Quote(script)+`]}`, rec.report)
		done <- time.Now()
	}()
	<-rec.first
	start := time.Now()
	cancel()
	return (<-done).Sub(start)
}
