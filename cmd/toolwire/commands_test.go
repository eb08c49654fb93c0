package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestTools(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")

	got := runCmd(t, s.addr, "tools")
	if got.err != nil {
		t.Fatalf("tools: %v\n%s", got.err, got.stderr)
	}
	want := `NAME   ANNOTATIONS           DESCRIPTION
echo   read-only,idempotent  Returns the given text unchanged.
fail   -                     Fails with the given message; for testing error handling.
sleep  read-only,idempotent  Waits for the given number of milliseconds, reporting progress, then returns.
`
	if diff := cmp.Diff(want, got.stdout); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}

	got = runCmd(t, s.addr, "tools", "--json")
	if got.err != nil {
		t.Fatalf("tools --json: %v", got.err)
	}
	var resp toolwirev1.ListToolsResponse
	if err := protojson.Unmarshal([]byte(got.stdout), &resp); err != nil {
		t.Fatalf("tools --json printed no ListToolsResponse: %v\n%s", err, got.stdout)
	}
	if len(resp.GetTools()) != 3 || resp.GetRevision() == "" {
		t.Errorf("tools --json: %d tools, revision %q; want 3 and a revision", len(resp.GetTools()), resp.GetRevision())
	}
}

func TestServeWithoutTools(t *testing.T) {
	t.Parallel()
	s := startServe(t)
	if !strings.Contains(s.stderr.String(), "no tools are registered") {
		t.Errorf("no warning about missing tools in the log:\n%s", s.stderr)
	}
	got := runCmd(t, s.addr, "tools")
	if got.err != nil || got.stdout != "NAME  ANNOTATIONS  DESCRIPTION\n" {
		t.Errorf("tools: %v, stdout %q; want only the header", got.err, got.stdout)
	}
	got = runCmd(t, s.addr, "call", "echo", `{"text":"hi"}`)
	if got.code != 1 || !strings.Contains(got.stdout, "no tools are registered") {
		t.Errorf("call: exit %d, stdout %q; want 1 and an UNKNOWN_TOOL result", got.code, got.stdout)
	}
}

func TestCall(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // exact
		stderrHave string // substring
	}{
		{"echo", []string{"echo", `{"text":"hi"}`}, 0, "hi\n", "started call-1"},
		{"progress is shown", []string{"--id", "nap", "sleep", `{"ms":60}`}, 0, "", "progress 0/60: sleeping 60 ms"},
		{"tool error", []string{"fail", `{"message":"disk full"}`}, 1, "disk full\n", "fail failed: ERROR_KIND_TOOL_ERROR"},
		{"invalid arguments", []string{"echo", `{"txt":"hi"}`}, 1, "", "ERROR_KIND_INVALID_ARGUMENTS"},
		{"unknown tool", []string{"nope"}, 1, `unknown tool "nope". Registered tools: echo, fail, sleep` + "\n", "ERROR_KIND_UNKNOWN_TOOL"},
		{"call timeout", []string{"--call-timeout", "20ms", "sleep", `{"ms":60000}`}, 1, "", "ERROR_KIND_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := runCmd(t, s.addr, append([]string{"call"}, tt.args...)...)
			if got.code != tt.code {
				t.Errorf("exit code %d (%v); want %d\nstderr: %s", got.code, got.err, tt.code, got.stderr)
			}
			if tt.stdout != "" && got.stdout != tt.stdout {
				t.Errorf("stdout %q; want %q", got.stdout, tt.stdout)
			}
			if !strings.Contains(got.stderr, tt.stderrHave) {
				t.Errorf("stderr does not contain %q:\n%s", tt.stderrHave, got.stderr)
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		t.Parallel()
		got := runCmd(t, s.addr, "call", "--json", "--id", "x", "echo", `{"text":"hi"}`)
		var r toolwirev1.CallResult
		if err := protojson.Unmarshal([]byte(got.stdout), &r); err != nil {
			t.Fatalf("call --json printed no CallResult: %v\n%s", err, got.stdout)
		}
		if r.GetCallId() != "x" || r.GetStructuredContent() != `{"text":"hi"}` {
			t.Errorf("call_id %q, structured content %q", r.GetCallId(), r.GetStructuredContent())
		}
	})

	// --no-progress runs the call as one CallTool: the same results and
	// exit codes, and nothing on stderr about its progress.
	for _, tt := range []struct {
		name       string
		args       []string
		code       int
		stdout     string // exact
		stderrHave string // substring
	}{
		{"no progress: echo", []string{"echo", `{"text":"hi"}`}, 0, "hi\n", ""},
		{"no progress: sleep", []string{"sleep", `{"ms":60}`}, 0, "", ""},
		{"no progress: tool error", []string{"fail", `{"message":"disk full"}`}, 1, "disk full\n", "fail failed: ERROR_KIND_TOOL_ERROR"},
		{"no progress: call timeout", []string{"--call-timeout", "20ms", "sleep", `{"ms":60000}`}, 1, "", "ERROR_KIND_TIMEOUT"},
		{"no progress: replayed", []string{"--idempotency-key", "k-no-progress", "echo", `{"text":"again"}`}, 0, "again\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := runCmd(t, s.addr, append([]string{"call", "--no-progress"}, tt.args...)...)
			if got.code != tt.code {
				t.Errorf("exit code %d (%v); want %d\nstderr: %s", got.code, got.err, tt.code, got.stderr)
			}
			if tt.stdout != "" && got.stdout != tt.stdout {
				t.Errorf("stdout %q; want %q", got.stdout, tt.stdout)
			}
			if !strings.Contains(got.stderr, tt.stderrHave) {
				t.Errorf("stderr does not contain %q:\n%s", tt.stderrHave, got.stderr)
			}
			for _, progress := range []string{"started", "progress", "finished"} {
				if strings.Contains(got.stderr, progress) {
					t.Errorf("stderr has progress (%q):\n%s", progress, got.stderr)
				}
			}
			if tt.name == "no progress: replayed" {
				again := runCmd(t, s.addr, append([]string{"call", "--no-progress"}, tt.args...)...)
				if again.code != 0 || again.stdout != tt.stdout || !strings.Contains(again.stderr, "replayed from the idempotency store") {
					t.Errorf("the call sent again: exit %d, stdout %q, stderr %q; want it replayed", again.code, again.stdout, again.stderr)
				}
			}
		})
	}

	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		got := runCmd(t, "127.0.0.1:1", "call", "echo", `{"text":"hi"}`)
		want := `no toolwire server at 127.0.0.1:1 (is "toolwire serve" running?)`
		if got.code != 1 || got.err == nil || got.err.Error() != want {
			t.Errorf("exit code %d, error %v; want 1 and %q", got.code, got.err, want)
		}
		got = runCmd(t, "127.0.0.1:1", "call", "--no-progress", "echo", `{"text":"hi"}`)
		if got.code != 1 || got.err == nil || got.err.Error() != want {
			t.Errorf("--no-progress: exit code %d, error %v; want 1 and %q", got.code, got.err, want)
		}
	})
}

// events parses batch's output, one protojson event a line.
func events(t *testing.T, out string) []*toolwirev1.ExecuteBatchResponse {
	t.Helper()
	var evs []*toolwirev1.ExecuteBatchResponse
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		ev := &toolwirev1.ExecuteBatchResponse{}
		if err := protojson.Unmarshal(sc.Bytes(), ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// results returns "call_id:error_kind" of each result event, in stream order.
func results(evs []*toolwirev1.ExecuteBatchResponse) []string {
	var out []string
	for _, ev := range evs {
		if r := ev.GetResult(); r != nil {
			out = append(out, r.GetCallId()+":"+strings.TrimPrefix(r.GetErrorKind().String(), "ERROR_KIND_"))
		}
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBatch(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag")
	ok := writeFile(t, "ok.json", `[
		{"call_id":"a","name":"echo","arguments":{"text":"one"}},
		{"call_id":"b","name":"echo","arguments":"{\"text\":\"two\"}"},
		{"name":"sleep","arguments":{"ms":1},"timeout":"5s"}
	]`)
	failing := writeFile(t, "failing.json", `[
		{"call_id":"bad","name":"fail","arguments":{"message":"no"}},
		{"call_id":"after","name":"echo","arguments":{"text":"late"}}
	]`)
	tests := []struct {
		name    string
		args    []string
		code    int
		lanes   int
		results []string // sorted by call ID
	}{
		{"parallel lane", []string{ok}, 0, 1, []string{"2:UNSPECIFIED", "a:UNSPECIFIED", "b:UNSPECIFIED"}},
		{"sequential", []string{"--sequential", ok}, 0, 3, []string{"2:UNSPECIFIED", "a:UNSPECIFIED", "b:UNSPECIFIED"}},
		{"error result exits 1", []string{failing}, 1, 2, []string{"after:UNSPECIFIED", "bad:TOOL_ERROR"}},
		{"stop on error", []string{"--stop-on-error", failing}, 1, 2, []string{"after:SKIPPED", "bad:TOOL_ERROR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := runCmd(t, s.addr, append([]string{"batch"}, tt.args...)...)
			if got.code != tt.code {
				t.Fatalf("exit code %d (%v); want %d\nstderr: %s", got.code, got.err, tt.code, got.stderr)
			}
			evs := events(t, got.stdout)
			if len(evs) < 2 || evs[0].GetAccepted() == nil || evs[len(evs)-1].GetFinished() == nil {
				t.Fatalf("want BatchAccepted first and BatchFinished last:\n%s", got.stdout)
			}
			if n := len(evs[0].GetAccepted().GetLanes()); n != tt.lanes {
				t.Errorf("%d lanes; want %d", n, tt.lanes)
			}
			res := results(evs)
			slices.Sort(res)
			if diff := cmp.Diff(tt.results, res); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("stdin", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
		defer cancel()
		var stdout, stderr strings.Builder
		in := strings.NewReader(`[{"call_id":"s","name":"echo","arguments":{"text":"from stdin"}}]`)
		if err := runBatch(ctx, []string{"--addr", s.addr, "-"}, in, &stdout, &stderr); err != nil {
			t.Fatalf("batch -: %v\n%s", err, stderr.String())
		}
		evs := events(t, stdout.String())
		if diff := cmp.Diff([]string{"s:UNSPECIFIED"}, results(evs)); diff != "" {
			t.Errorf("results (-want +got):\n%s", diff)
		}
	})

	t.Run("bad file", func(t *testing.T) {
		t.Parallel()
		for _, content := range []string{`{"name":"echo"}`, `[{"name":"echo","args":{}}]`, `[{"name":"sleep","timeout":5}]`} {
			got := runCmd(t, s.addr, "batch", writeFile(t, "bad.json", content))
			if got.code != 1 || got.stdout != "" {
				t.Errorf("batch file %s: exit code %d, stdout %q; want 1 and nothing sent", content, got.code, got.stdout)
			}
		}
	})
}
