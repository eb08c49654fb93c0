package engine

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/store"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/tools"
)

// finishRace is an event log whose first renewal, once armed, waits until
// the log has been finished, as one under way when its batch ends does.
type finishRace struct {
	store.EventLog
	armed    atomic.Bool
	renewing chan struct{} // closed when the armed renewal begins
	finished chan struct{} // closed when a log is finished
	once     sync.Once
}

func (f *finishRace) RenewLog(ctx context.Context, name, owner string, lease time.Duration) error {
	if f.armed.CompareAndSwap(true, false) {
		close(f.renewing)
		<-f.finished
	}
	return f.EventLog.RenewLog(ctx, name, owner, lease)
}

func (f *finishRace) Finish(ctx context.Context, name, owner string, ttl time.Duration, data ...[]byte) error {
	err := f.EventLog.Finish(ctx, name, owner, ttl, data...)
	f.once.Do(func() { close(f.finished) })
	return err
}

// A renewal of a detached batch's lease under way when the batch finishes
// is refused by the store (a finished log is no one's to renew). That
// refusal was taken for the log lost: a batch that had finished, its
// results all stored, was logged at ERROR as lost and cancelled (5 times
// in 2.5 minutes of a randomized soak against a real server).
func TestRenewalRacingTheFinishIsNoLoss(t *testing.T) {
	t.Parallel()
	m := memory.New(memory.Options{})
	fr := &finishRace{EventLog: m, renewing: make(chan struct{}), finished: make(chan struct{})}
	var logs logbuf.Buffer
	gate := make(chan struct{})
	te := newTestBedWith(t, Config{}, Deps{Idempotency: m, Vars: m, EventLog: fr, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		tools.Tool{Name: "gate", Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			select {
			case <-gate:
				return tools.Text("through"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})
	renewed := make(chan struct{}, 8)
	te.e.afterRenew = func() { renewed <- struct{}{} }
	fr.armed.Store(true)

	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("a", "gate", "")}, Options: &toolwirev1.BatchOptions{Detach: true}}
	var got recorder
	done := make(chan error, 1)
	go func() { done <- te.e.Run(as("alice"), te.reg.Snapshot(), req, &got) }()
	select {
	case <-fr.renewing:
	case <-testDeadline(t):
		t.Fatal("no renewal by the test's deadline")
	}
	close(gate) // the batch finishes while its renewal is under way
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case <-renewed:
	case <-testDeadline(t):
		t.Fatal("the renewal did not return by the test's deadline")
	}
	if strings.Contains(logs.String(), "event log lost") {
		t.Errorf("a batch that finished was logged as lost:\n%s", logs.String())
	}
	evs := got.get()
	if r := results(t, evs)["a"]; r.GetIsError() || evs[len(evs)-1].GetFinished() == nil {
		t.Errorf("result %v, last event %v; want the call's own result, then BatchFinished", r, evs[len(evs)-1])
	}
}
