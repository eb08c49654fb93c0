package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

const scenarioPath = "../scenario.json"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startServer serves the diag tools over TCP on 127.0.0.1, as
// `toolwire serve --diag` does, and returns its address and a channel that
// receives the call ID of every sleep call whose context was cancelled, so
// a test can see a client's cancel reach the tool.
func startServer(t *testing.T) (addr string, cancelledSleeps <-chan string) {
	t.Helper()
	ts := diag.Tools()
	cancelled := make(chan string, 64)
	for i := range ts {
		if ts[i].Name != "sleep" {
			continue
		}
		sleep := ts[i].Handler
		ts[i].Handler = func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			res, err := sleep(ctx, call)
			if errors.Is(err, context.Canceled) {
				cancelled <- call.ID
			}
			return res, err
		}
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{DrainTimeout: time.Second}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
		if n := eng.Stats().Abandoned; n != 0 {
			t.Errorf("%d tools were abandoned; the cancelled sleep must stop", n)
		}
		eng.Close()
	})
	return lis.Addr().String(), cancelled
}

func newClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestScenario(t *testing.T) {
	t.Parallel()
	addr, cancelledSleeps := startServer(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-addr", addr, "-scenario", scenarioPath, "-v"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// The hand-off: the conversation holds the user's message, then for each
	// finished batch the model's message and one OpenAI tool message per call
	// (1+7, 1+1), then the final answer.
	for _, want := range []string{
		`"role": "tool",
      "tool_call_id": "read_a",
      "content": "hello"`,
		`"tool_call_id": "write_c",
      "content": "disk full"`,
		`"tool_call_id": "nap"`, `"type": "function"`, `"name": "sleep"`,
		"scenario passed: 6 steps, 12 messages",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
	// The cancel reached the tool: its context was cancelled. (Waiting has
	// no time limit of its own; the test's deadline bounds it.)
	if id := <-cancelledSleeps; id != "long_nap" {
		t.Errorf("cancelled sleep %q, want long_nap", id)
	}
	if strings.Contains(out.String(), `"long_nap"`) || strings.Contains(out.String(), `"twin"`) {
		t.Errorf("a batch that did not finish was answered in the conversation:\n%s", out.String())
	}
}

// TestScenarioCheckerFails runs the scenario with wrong expectations and
// checks that each is reported, so a passing run means something.
func TestScenarioCheckerFails(t *testing.T) {
	t.Parallel()
	addr, _ := startServer(t)
	c := newClient(t, addr)
	tests := []struct {
		name   string
		mutate func(s *Scenario)
		want   string
	}{
		{"error kind", func(s *Scenario) {
			step(t, s, "mixed_batch").Expect.Calls["write_c"].Result.ErrorKind = "ERROR_KIND_TIMEOUT"
		}, "mixed_batch: call write_c: error_kind ERROR_KIND_TOOL_ERROR, want ERROR_KIND_TIMEOUT"},
		{"lane plan", func(s *Scenario) {
			step(t, s, "mixed_batch").Expect.Lanes[1].Parallel = true
		}, "mixed_batch: lanes "},
		{"finished counts", func(s *Scenario) {
			step(t, s, "mixed_batch").Expect.Finished["failed"] = 3
		}, "finished failed = 4, want 3"},
		{"text", func(s *Scenario) {
			step(t, s, "mixed_batch").Expect.Calls["ghost_d"].Result.TextContains = []string{"no such tool"}
		}, `does not contain "no such tool"`},
		{"structured", func(s *Scenario) {
			step(t, s, "mixed_batch").Expect.Calls["read_a"].Result.Structured = []byte(`{"text":"bye"}`)
		}, `structured_content {"text":"hello"}, want {"text":"bye"}`},
		{"events", func(s *Scenario) {
			step(t, s, "progress").Expect.Calls["nap"].Events = "^SR$"
		}, `progress: call nap: events "SP`},
		{"rpc status", func(s *Scenario) {
			step(t, s, "cancel_mid_way").Expect.RPCStatus = "OK"
		}, "cancel_mid_way: the RPC ended with CANCELLED"},
		{"declarations", func(s *Scenario) {
			s.Steps[0].ListTools.ToolsInclude[1].ReadOnly = true
		}, `declarations: tool "fail": read_only false, want true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := LoadScenario(scenarioPath)
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(s)
			_, mismatches := Run(context.Background(), c, s)
			if len(mismatches) == 0 {
				t.Fatalf("no mismatch reported; want one containing %q", tt.want)
			}
			found := false
			for _, m := range mismatches {
				found = found || strings.Contains(m, tt.want)
			}
			if !found {
				t.Errorf("mismatches %q lack %q", mismatches, tt.want)
			}
		})
	}
}

func TestParseScenarioRefusesUnknownKeys(t *testing.T) {
	t.Parallel()
	_, err := ParseScenario([]byte(`{"steps":[{"name":"x","assistant":{"role":"assistant","content":"hi"},"expect":{"evnts":"^$"}}]}`))
	if err == nil || !strings.Contains(err.Error(), "evnts") {
		t.Errorf("err = %v, want one naming the unknown key", err)
	}
}

func step(t *testing.T, s *Scenario, name string) *Step {
	t.Helper()
	for i := range s.Steps {
		if s.Steps[i].Name == name {
			return &s.Steps[i]
		}
	}
	t.Fatalf("no step %q", name)
	return nil
}
