package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
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

// TestKeyedCallsOnAFullDisk: the disk under a bolt store (a real tmpfs)
// fills while a keyed call runs, so its 256 KiB result cannot be
// recorded. Its caller gets the result whole but for the room of a
// note in details saying it is held, not recorded yet (a result at
// max_result_bytes lost that note to the bound, so its caller could not
// tell it was unrecorded); a resend is replayed, not run again. A new
// keyed call is not run and says why (no space), a new detached batch is
// refused UNAVAILABLE saying so, a plain batch runs. Once there is room
// the held record lands without a restart, and every resend replays it.
func TestKeyedCallsOnAFullDisk(t *testing.T) {
	dir := testenv.SmallFS(t, 8<<20)
	st, err := bolt.Open(filepath.Join(dir, "toolwire.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // before the unmount
	gate := make(chan struct{})
	var runs atomic.Int32
	big := tools.Tool{
		Name:        "bigwait",
		Description: "waits, then returns 512 KiB (shaped to max_result_bytes)",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			runs.Add(1)
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return tools.Text(strings.Repeat("x", 512<<10)), nil
		},
	}
	te := newTestBedWith(t, Config{}, Deps{Idempotency: st, Vars: st, EventLog: st}, big)
	lb := startBatch(t, as("alice"), te, one(keyed("a", "bigwait", "", "k")))
	free := fill(t, dir)
	close(gate)
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	res := results(t, events)["a"]
	note := idempotencyNote(t, res)
	if res.GetIsError() || note["recorded"] != false || note["held"] != true ||
		!strings.Contains(fmt.Sprint(note["note"]), "no space left on device") {
		t.Fatalf("result of the call whose record the full disk refused: details %q; want details.idempotency saying it is held, not recorded, for lack of space", res.GetDetails())
	}
	if limit := te.e.cfg.MaxResultBytes; payload(res) > limit || payload(res) < limit-4<<10 {
		t.Errorf("result of %d bytes, want the most of max_result_bytes (%d) the note leaves", payload(res), limit)
	}
	if r := results(t, te.runAs(t, "alice", one(keyed("b", "bigwait", "", "k"))))["b"]; !r.GetReplayed() {
		t.Errorf("resend on the full disk: %v; want it replayed from the held record", r.GetErrorKind())
	}
	// New keys: the first few may fit in the file's free pages.
	refused := ""
	for i := 0; refused == "" && i < 100; i++ {
		key := fmt.Sprint("new", i)
		r := results(t, te.runAs(t, "alice", one(keyed("c", "echo", `{"text":"new"}`, key))))["c"]
		if r.GetIsError() {
			if r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_INTERNAL || !strings.Contains(text(r), "was not run") ||
				!strings.Contains(text(r), "no space left on device") {
				t.Fatalf("a new keyed call on the full disk: %v %q; want INTERNAL, not run, saying there is no space", r.GetErrorKind(), text(r))
			}
			refused = key
		}
	}
	if refused == "" {
		t.Fatal("100 new keyed calls were recorded on the full disk")
	}
	_, err = te.runErr(as("alice"), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("d", "echo", `{"text":"x"}`)},
		Options: &toolwirev1.BatchOptions{Detach: true}})
	if CodeOf(err) != Unavailable || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("a detached batch on the full disk: %v; want Unavailable saying there is no space", err)
	}
	if r := results(t, te.runAs(t, "alice", one(call("p", "echo", `{"text":"plain"}`))))["p"]; text(r) != "plain" {
		t.Errorf("a plain batch on the full disk: %v %q; want it run", r.GetErrorKind(), text(r))
	}

	free()
	waitFor(t, func() bool { return te.e.Stats().HeldRecords == 0 })
	if c, err := st.Claim(context.Background(), "probe", "fp", "o", time.Minute, time.Minute); err != nil || c.State == 0 {
		t.Fatalf("the store once there is room: %v %v", c.State, err)
	}
	if r := results(t, te.runAs(t, "alice", one(keyed("e", "bigwait", "", "k"))))["e"]; !r.GetReplayed() || r.GetDetails() != "" {
		t.Errorf("resend once there is room: replayed %v, details %q; want the recorded result replayed", r.GetReplayed(), r.GetDetails())
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the keyed call ran %d times, want once", n)
	}
	if r := results(t, te.runAs(t, "alice", one(keyed("f", "echo", `{"text":"new"}`, refused))))["f"]; r.GetIsError() {
		t.Errorf("the refused keyed call, sent again once there is room: %q; want it run", text(r))
	}
	if _, err := te.runErr(as("alice"), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("g", "echo", `{"text":"x"}`)},
		Options: &toolwirev1.BatchOptions{Detach: true}}); err != nil {
		t.Errorf("a detached batch once there is room: %v", err)
	}
}

// TestDetachedBatchOutlastsAFullDiskLongerThanItsLease: the disk stays
// full for three leases after a detached batch's call has ended with a
// result the store cannot take, while the lease's renewals (small) still
// land. The owner is alive and says so: its batch waits for room and ends
// with the call's own result. It used to give up two leases after the
// call ended, so its readers ended it as owner lost, CANCELLED "the
// replica running this batch was lost ... send it again", on the one
// replica there is, the result thrown away and a resend inviting a second
// run.
func TestDetachedBatchOutlastsAFullDiskLongerThanItsLease(t *testing.T) {
	dir := testenv.SmallFS(t, 4<<20)
	st, err := bolt.Open(filepath.Join(dir, "toolwire.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // before the unmount
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	var runs atomic.Int32
	big := tools.Tool{
		Name:        "bigwait",
		Description: "waits, then returns 128 KiB",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, call *tools.Call) (*tools.Result, error) {
			runs.Add(1)
			started <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return tools.Text("done " + strings.Repeat("x", 128<<10)), nil
		},
	}
	const lease = 2 * time.Second
	te := newTestBedWith(t, Config{BatchLease: lease}, Deps{Idempotency: st, Vars: st, EventLog: st}, big)
	lb := startDetached(t, as("alice"), te, one(call("c", "bigwait", `{}`)))
	<-started
	free := fill(t, dir)
	close(gate)
	time.Sleep(3 * lease)
	if info, err := st.Stat(context.Background(), logName("alice", batchIDOf(t, lb.snapshot()))); err != nil || info.Finished || !info.Owned {
		t.Fatalf("the batch's log after three leases of a full disk: %+v %v; want it running, owned", info, err)
	}
	free()
	events, err := drain(lb)
	if err != nil {
		t.Fatal(err)
	}
	res := results(t, events)["c"]
	if res.GetIsError() || !strings.HasPrefix(text(res), "done x") {
		t.Fatalf("the call's result: %v %.200q; want its own", res.GetErrorKind(), text(res))
	}
	if f := finishedOf(events); f.GetSucceeded() != 1 {
		t.Errorf("BatchFinished %v; want 1 succeeded", f)
	}
	sameEvents(t, "attachment", events, attachAll(t, te, batchIDOf(t, events)))
	if n := runs.Load(); n != 1 {
		t.Errorf("the call ran %d times", n)
	}
}
