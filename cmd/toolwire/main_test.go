package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(removingBuilt{m})
}

// testTimeout bounds waits for things that must happen; it only fails a
// test that would otherwise hang.
const testTimeout = time.Minute

// waitFor polls until cond holds, failing t after testTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listenAddr returns the address in the "toolwire listening on" log line.
func listenAddr(log string) (string, bool) {
	for line := range strings.Lines(log) {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "toolwire listening on ") {
			return rec.Addr, true
		}
	}
	return "", false
}

// server is a "toolwire serve" running in-process.
type server struct {
	addr   string
	stderr *logbuf.Buffer
	stop   func() error // cancels serve and returns run's error
}

// startServe runs "toolwire serve --listen 127.0.0.1:0 --no-workspace
// args..." until the test ends, and returns once it listens. Tests that want
// the workspace tools pass --no-workspace=false --workspace DIR.
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{stderr: &logbuf.Buffer{}}
	done := make(chan error, 1)
	go func() {
		base := []string{"serve", "--listen", "127.0.0.1:0"}
		if !slices.Contains(args, "--workspace") { // a test that wants the workspace tools names its folder
			base = append(base, "--no-workspace")
		}
		done <- run(ctx, append(base, args...), &bytes.Buffer{}, s.stderr)
	}()
	var once sync.Once
	var err error
	s.stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	waitFor(t, "the listening line", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve returned early: %v\n%s", err, s.stderr)
		default:
		}
		var ok bool
		s.addr, ok = listenAddr(s.stderr.String())
		return ok
	})
	return s
}

// result is what one run of a client command did.
type result struct {
	stdout, stderr string
	code           int
	err            error
}

// runCmd runs a command line against the server at addr.
func runCmd(t *testing.T, addr string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	args = append([]string{args[0], "--addr", addr}, args[1:]...)
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, &stdout, &stderr)
	return result{stdout.String(), stderr.String(), exitCode(err), err}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("x"), 1},
		{&exitError{code: 1}, 1},
		{usageError("bad"), 2},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d; want %d", tt.err, got, tt.want)
		}
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
		want string // what a command's usage error says, before the hint
	}{
		{"no command", nil, 2, ""},
		{"unknown command", []string{"frobnicate"}, 2, ""},
		{"help", []string{"help"}, 0, ""},
		{"command help", []string{"call", "-h"}, 0, ""},
		{"unknown flag", []string{"tools", "--nope"}, 2, "tools: flag provided but not defined: -nope"},
		{"flag without value", []string{"call", "echo", "--id"}, 2, "call: flag needs an argument: -id"},
		{"call without name", []string{"call"}, 2, "call: want a tool name"},
		{"call with extra args", []string{"call", "echo", "{}", "more"}, 2, "call: want a tool name"},
		{"batch without file", []string{"batch"}, 2, "batch: want one FILE"},
		{"serve with argument", []string{"serve", "extra"}, 2, `serve: unexpected arguments ["extra"]`},
		{"serve with bad log level", []string{"serve", "--log-level", "loud", "--listen", "127.0.0.1:0"}, 2, "serve: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			if got := exitCode(err); got != tt.code {
				t.Errorf("exit code %d (%v); want %d\nstderr: %s", got, err, tt.code, stderr.String())
			}
			if stdout.Len()+stderr.Len() == 0 && (err == nil || err.Error() == "") {
				t.Error("nothing printed")
			}
			if tt.want == "" {
				return
			}
			// A usage error is the error and where help is, not the
			// whole -h text with every flag (as it was).
			hint := `run "toolwire ` + tt.args[0] + ` -h" for help`
			if msg := err.Error(); !strings.HasPrefix(msg, tt.want) || !strings.HasSuffix(msg, "\n"+hint) || stderr.Len() > 0 {
				t.Errorf("usage error %q, stderr %q; want %q..., then %q, and nothing else", msg, stderr.String(), tt.want, hint)
			}
		})
	}
}
