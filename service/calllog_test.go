package service

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// lockedBuffer is a bytes.Buffer a server's goroutines may log to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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
		logs := &lockedBuffer{}
		ts := newTestServer(t, engine.Config{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level}))})
		evs := ts.run(t, req)
		batchID := evs[0].GetAccepted().GetBatchId()
		// The stream ends after the handler has returned, and so after
		// its batch line.
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
