package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/store/bolt"
	"github.com/toolwire/toolwire/tools"
)

// fill writes a file in dir until its filesystem is full (ENOSPC) and
// returns a func that removes it.
func fill(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDetachedBatchesRideOutAFullDisk: the disk under a bolt store fills
// (a real tmpfs) while detached batches' calls finish, so that no event of
// theirs (their results of 128 KiB) can be written. The owner keeps what the store does not take and
// writes it once there is room: every batch ends with its call's own
// result and BatchFinished, none cancelled or lost, and what its stream
// got is what the store holds.
func TestDetachedBatchesRideOutAFullDisk(t *testing.T) {
	dir := testenv.SmallFS(t, 4<<20)
	st, err := bolt.Open(filepath.Join(dir, "toolwire.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // before the unmount
	// Each call waits for the gate, then returns 128 KiB: more than the
	// pages the file has free, so its events need the disk.
	gate, started := make(chan struct{}), make(chan struct{}, 16)
	big := tools.Tool{
		Name:        "bigwait",
		Description: "waits, then returns 128 KiB",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			var a struct{ N int }
			_ = json.Unmarshal(call.Arguments, &a)
			started <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return tools.Text(fmt.Sprintf("n=%d ", a.N) + strings.Repeat("x", 128<<10)), nil
		},
	}
	te := newTestBedWith(t, Config{BatchLease: 10 * time.Second}, Deps{Idempotency: st, Vars: st, EventLog: st}, big)
	const n = 4
	var live []*liveBatch
	for i := range n {
		lb := startDetached(t, as("alice"), te, one(call(fmt.Sprint("c", i), "bigwait", fmt.Sprintf(`{"n":%d}`, i))))
		<-started
		live = append(live, lb)
	}
	free := fill(t, dir)
	close(gate) // the calls finish while nothing can be written
	// Full for a few lease renewals (each tick is 500ms), well short of
	// the lease.
	time.Sleep(1500 * time.Millisecond)
	for i, lb := range live {
		if evs := lb.snapshot(); len(results(t, evs)) > 0 {
			t.Fatalf("batch %d's stream got its result while the disk was full: the fault was not met (%d events)", i, len(evs))
		}
	}
	free()
	for i, lb := range live {
		events, err := drain(lb)
		if err != nil {
			t.Fatalf("batch %d's stream: %v", i, err)
		}
		res := results(t, events)[fmt.Sprint("c", i)]
		if res.GetIsError() || !strings.HasPrefix(text(res), fmt.Sprintf("n=%d x", i)) || len(text(res)) < 128<<10 {
			t.Errorf("batch %d's call: %v; want its own result", i, res)
		}
		if f := finishedOf(events); f.GetSucceeded() != 1 || f.GetCancelled() != 0 {
			t.Errorf("batch %d: last event %v; want BatchFinished, 1 succeeded", i, events[len(events)-1])
		}
		sameEvents(t, fmt.Sprintf("batch %d's attachment", i), events, attachAll(t, te, batchIDOf(t, events)))
	}
}
