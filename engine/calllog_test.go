package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
)

// debugEngine returns an engine logging JSON at debug level, and a function
// returning its records with message msg.
func debugEngine(t *testing.T) (*Engine, func(msg string) []map[string]any) {
	t.Helper()
	var mu sync.Mutex
	var logs strings.Builder
	e := New(Config{}, Deps{Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	t.Cleanup(e.Close)
	return e, func(msg string) []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		var out []map[string]any
		for line := range strings.Lines(logs.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["msg"] == msg {
				out = append(out, rec)
			}
		}
		return out
	}
}

// TestDebugLinesSpellCancelledOneWay checks that after the client aborts,
// the call's line and the batch's both say "cancelled", as the contract's
// CANCELLED and gRPC's status code are spelt (the batch's said "canceled",
// Go's spelling of the code's name).
func TestDebugLinesSpellCancelledOneWay(t *testing.T) {
	t.Parallel()
	e, lines := debugEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
		if ev.GetStarted() != nil {
			cancel() // the client goes while the call runs
		}
		return nil
	})
	if err := e.Run(ctx, engineTools(t, func(string) {}), calls(tc("h", "hold")), sink); CodeOf(err) != Canceled {
		t.Fatalf("Run: %v; want Canceled", err)
	}
	var got []string
	for _, msg := range []string{"call finished", "batch finished"} {
		for _, rec := range lines(msg) {
			got = append(got, msg+": "+rec["outcome"].(string))
		}
	}
	if diff := cmp.Diff([]string{"call finished: cancelled", "batch finished: cancelled"}, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// TestBatchLineHasTheLanePlan checks that the batch's debug line lists its
// lanes as call IDs, so that the logs alone show which calls ran in
// parallel.
func TestBatchLineHasTheLanePlan(t *testing.T) {
	t.Parallel()
	e, lines := debugEngine(t)
	req := calls(tc("w1", "write"), tc("r1", "echo"), tc("r2", "echo"), tc("w2", "write"))
	if err := e.Run(context.Background(), engineTools(t, func(string) {}), req, &recorder{}); err != nil {
		t.Fatal(err)
	}
	recs := lines("batch finished")
	if len(recs) != 1 {
		t.Fatalf("%d batch lines; want 1", len(recs))
	}
	want := []any{[]any{"w1"}, []any{"r1", "r2"}, []any{"w2"}}
	if diff := cmp.Diff(want, recs[0]["lanes"]); diff != "" {
		t.Errorf("lanes (-want +got):\n%s", diff)
	}
}

// debugLines returns the JSON log records with message msg.
func debugLines(t *testing.T, log, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(log) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestDebugLogPerBatchAndCall checks the debug lines a batch leaves: one
// per call with its batch, call ID, tool, outcome and duration, and one for
// the batch with its lane plan; and none at the info level.
func TestDebugLogPerBatchAndCall(t *testing.T) {
	t.Parallel()
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		call("a", "echo", `{"text":"hi"}`),
		call("b", "fail", `{"message":"no"}`),
	}}
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		logs := &logbuf.Buffer{}
		te := newTestBedWith(t, Config{}, Deps{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level}))})
		evs := te.run(t, req)
		batchID := evs[0].GetAccepted().GetBatchId()
		// Run returns after its batch line.
		calls := debugLines(t, logs.String(), "call finished")
		batches := debugLines(t, logs.String(), "batch finished")
		if level > slog.LevelDebug {
			if len(calls)+len(batches) != 0 {
				t.Errorf("at %v: debug lines logged:\n%s", level, logs)
			}
			continue
		}
		want := map[string]string{"a": "echo ok", "b": "fail tool_error"}
		for _, c := range calls {
			id, _ := c["call_id"].(string)
			if got := c["tool"].(string) + " " + c["outcome"].(string); got != want[id] || c["batch_id"] != batchID || c["duration"] == nil {
				t.Errorf("call line %v; want batch %s, tool and outcome %q, a duration", c, batchID, want[id])
			}
			delete(want, id)
		}
		if len(want) != 0 || len(calls) != 2 {
			t.Errorf("call lines %v; want one for each of a and b", calls)
		}
		if len(batches) != 1 || batches[0]["batch_id"] != batchID || batches[0]["calls"] != 2.0 || batches[0]["failed"] != 1.0 || batches[0]["outcome"] != "ok" {
			t.Errorf("batch lines %v; want one for batch %s: 2 calls, 1 failed, ok", batches, batchID)
		}
		// echo is read-only, fail is not: a lane each.
		if lanes, _ := json.Marshal(batches[0]["lanes"]); string(lanes) != `[["a"],["b"]]` {
			t.Errorf("batch line's lanes %s; want [[\"a\"],[\"b\"]]", lanes)
		}
	}
}
