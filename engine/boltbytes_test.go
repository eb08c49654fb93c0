package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/tools"
)

// TestBoltStoreBoundedInBytes: keyed calls and finished detached batches
// with 200 KiB results, through the engine on a real bolt store bounded
// at 8 MiB of records and 8 MiB of logs: the file stops growing, the
// latest call is still replayed and the latest batch still attached.
// Before the bounds each keyed call grew the file by 0.28 MiB and each
// batch of two results by 0.4 MiB, for their TTLs (24h), without end: 400
// of each made a 276 MiB file.
func TestBoltStoreBoundedInBytes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "toolwire.db")
	st, err := bolt.Open(path, bolt.Options{MaxBytes: 8 << 20, MaxLogBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	big := tools.Tool{
		Name:        "big200k",
		Description: "returns 200 KiB",
		InputSchema: []byte(`{"type":"object"}`),
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return tools.Text(strings.Repeat("x", 200<<10)), nil
		},
	}
	te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st, EventLog: st}, big)
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	var sizes []int64
	const n = 200
	for i := range n {
		te.runAs(t, "alice", one(keyed(fmt.Sprint("c", i), "big200k", "", fmt.Sprint("k", i))))
		if (i+1)%(n/4) == 0 {
			sizes = append(sizes, size())
		}
	}
	var last string
	for i := range n / 2 {
		req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "big200k", ""), call("b", "big200k", "")},
			Options: &toolwirev1.BatchOptions{Detach: true}}
		events, err := te.runErr(as("alice"), req)
		if err != nil {
			t.Fatal(err)
		}
		last = batchIDOf(t, events)
		if (i+1)%(n/8) == 0 {
			sizes = append(sizes, size())
		}
	}
	t.Logf("file after every 50 keyed calls, then every 25 detached batches: %v bytes", sizes)
	// 8 MiB + 8 MiB, and the pages bbolt keeps free; unbounded it passes
	// 90 MiB.
	if got := sizes[len(sizes)-1]; got > 48<<20 {
		t.Fatalf("file sizes %v: the store outgrew its bounds", sizes)
	}
	retry := te.runAs(t, "alice", one(keyed("again", "big200k", "", fmt.Sprint("k", n-1))))
	if r := results(t, retry)["again"]; !r.GetReplayed() {
		t.Errorf("the latest keyed call, sent again: %v; want it replayed", r)
	}
	if events := attachAll(t, te, last); finishedOf(events) == nil {
		t.Errorf("the latest detached batch: %d events, want them all, BatchFinished last", len(events))
	}
}
