package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A batch's only call runs in the batch's context, which its deadline and
// idle timeout cancel (callRun.run, loneCtx). To its tool it must look as a
// context of its own would, and its result must say what ended it, as in
// a batch of several calls.

// ctxSeen is what a tool saw of its context once it ended.
type ctxSeen struct {
	err, cause  error
	deadline    time.Time
	hasDeadline bool
}

// waitingTool waits for its context and reports what it saw on seen.
func waitingTool(seen chan<- ctxSeen) tools.Tool {
	return tools.Tool{
		Name:        "wait_ctx",
		Description: "Waits for its context to end.",
		InputSchema: []byte(`{"type":"object"}`),
		Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			<-ctx.Done()
			d, ok := ctx.Deadline()
			seen <- ctxSeen{err: ctx.Err(), cause: context.Cause(ctx), deadline: d, hasDeadline: ok}
			return nil, ctx.Err()
		},
	}
}

func TestOneCallContextEndsAsItsOwn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      Config
		calls    int // in the batch; each waits
		timeout  time.Duration
		cancel   bool // the caller cancels instead
		wantKind toolwirev1.ErrorKind
		wantText string
		wantErr  error // what the tool's ctx.Err() says
	}{
		{name: "deadline alone", calls: 1, timeout: 30 * time.Millisecond,
			wantKind: toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, wantText: "timed out after 30ms", wantErr: context.DeadlineExceeded},
		{name: "deadline among two", calls: 2, timeout: 30 * time.Millisecond,
			wantKind: toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, wantText: "timed out after 30ms", wantErr: context.DeadlineExceeded},
		{name: "idle alone", calls: 1, cfg: Config{IdleTimeout: 30 * time.Millisecond},
			wantKind: toolwirev1.ErrorKind_ERROR_KIND_TIMEOUT, wantText: "no progress for 30ms", wantErr: context.Canceled},
		{name: "cancelled alone", calls: 1, cancel: true,
			wantKind: toolwirev1.ErrorKind_ERROR_KIND_CANCELLED, wantText: "cancelled", wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan ctxSeen, tc.calls)
			te := newTestBed(t, tc.cfg, waitingTool(seen))
			req := &toolwirev1.ExecuteBatchRequest{Options: &toolwirev1.BatchOptions{Sequential: true}}
			for i := range tc.calls {
				c := call(string(rune('a'+i)), "wait_ctx", "")
				if tc.timeout > 0 {
					c.Timeout = durationpb.New(tc.timeout)
				}
				req.Calls = append(req.Calls, c)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var events []*toolwirev1.ExecuteBatchResponse // one writer: no lock
			sink := SinkFunc(func(ev *toolwirev1.ExecuteBatchResponse) error {
				events = append(events, ev)
				if tc.cancel && ev.GetStarted() != nil {
					cancel()
				}
				return nil
			})
			_ = te.e.Run(ctx, te.reg.Snapshot(), req, sink)
			got := <-seen
			if !errors.Is(got.err, tc.wantErr) {
				t.Errorf("the tool's ctx.Err() = %v, want %v", got.err, tc.wantErr)
			}
			if !got.hasDeadline || got.deadline.IsZero() {
				t.Errorf("the tool's context has no deadline")
			}
			if tc.timeout > 0 && !errors.Is(got.cause, context.DeadlineExceeded) {
				t.Errorf("the tool's context.Cause = %v, want a DeadlineExceeded", got.cause)
			}
			if tc.cancel {
				return // the stream ended: the result was not sent
			}
			res := results(t, events)["a"]
			if res.GetErrorKind() != tc.wantKind || !strings.Contains(text(res), tc.wantText) {
				t.Errorf("result %v %q, want %v containing %q", res.GetErrorKind(), text(res), tc.wantKind, tc.wantText)
			}
			if n := len(results(t, events)); n != tc.calls {
				t.Errorf("%d results for %d calls", n, tc.calls)
			}
		})
	}
}

// TestOneCallBatchAllocations bounds what a one-call batch of echo
// allocates in the engine (testing.AllocsPerRun is deterministic, not a
// timing): the figure docs/performance.md reports, held.
func TestOneCallBatchAllocations(t *testing.T) {
	te := newTestBed(t, Config{})
	snap := te.reg.Snapshot()
	sink := SinkFunc(func(*toolwirev1.ExecuteBatchResponse) error { return nil })
	ctx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{call("1", "echo", `{"text":"hello"}`)}}
		if err := te.e.Run(ctx, snap, req, sink); err != nil {
			t.Fatal(err)
		}
	})
	// 39 before the batch's only call shared its context (main, 35f489f),
	// 35 before a call with room to report stopped asking for its
	// context's Done channel.
	const most = 34
	t.Logf("%.0f allocations per one-call batch", allocs)
	if allocs > most {
		t.Errorf("a one-call batch allocates %.0f times; at most %d", allocs, most)
	}
}
