package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain serves as the measured server when the command, run by the
// test, starts this test binary as its child with --serve.
func TestMain(m *testing.M) {
	if name, calls, ok := serveArgs(os.Args[1:]); ok {
		if err := runServer(context.Background(), name, calls, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "inflight:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHoldAndRelease runs the command at a small scale against both
// servers, each a real child process: every stream is held and then ends
// as it should (the command fails otherwise), nothing is left running on
// the server, and each row has figures. It checks no size: that is what
// the command reports.
func TestHoldAndRelease(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, []string{"--calls", "300", "--conns", "3", "--settle", "100ms"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"| grpc |", "| toolwire |", "toolwire over bare gRPC, per call"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	for line := range strings.Lines(out.String()) {
		if strings.HasPrefix(line, "| grpc |") || strings.HasPrefix(line, "| toolwire |") {
			if f := strings.Split(line, "|"); strings.TrimSpace(f[len(f)-2]) != "0" {
				t.Errorf("errors in %q", line)
			}
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, args := range [][]string{{"--servers", "grpc,nope"}, {"--calls", "0"}, {"extra"}} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("parseArgs(%q) = nil error", args)
		}
	}
	o, err := parseArgs(nil)
	if err != nil || o.calls != 50_000 || len(o.servers) != 2 {
		t.Errorf("parseArgs(nil) = %+v, %v; want 50,000 calls on both servers", o, err)
	}
}
