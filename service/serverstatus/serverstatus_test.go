package serverstatus

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// started is a sink that says when the batch's first call has started.
type started chan struct{}

func (s started) Send(ev *toolwirev1.ExecuteBatchResponse) error {
	if ev.GetStarted() != nil {
		select {
		case s <- struct{}{}:
		default:
		}
	}
	return nil
}

func as(id string, groups ...string) context.Context {
	return engine.WithIdentity(context.Background(), &engine.Identity{ID: id, Groups: groups, Method: engine.MethodToken})
}

// running starts a long sleep for ctx's caller and returns once it runs;
// the test's end cancels it.
func running(t *testing.T, eng *engine.Engine, reg *tools.Registry, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	s := make(started, 1)
	done := make(chan error, 1)
	go func() {
		done <- eng.Run(ctx, reg.Snapshot(), &toolwirev1.ExecuteBatchRequest{SessionId: "s",
			Calls: []*toolwirev1.ToolCall{{CallId: "a", Name: "sleep", Arguments: `{"ms":600000}`}}}, s)
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s:
	case err := <-done:
		t.Fatalf("the batch ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not start")
	}
}

// status is v's answer for ctx's caller, failing the test on an error.
func status(t *testing.T, v *View, ctx context.Context) *toolwirev1.GetServerStatusResponse {
	t.Helper()
	resp, err := v.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return resp
}

func TestStatus(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Source("mcp:files").Set(tools.Tool{Name: "files_read", Description: "d",
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text(""), nil }}); err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{})
	t.Cleanup(func() { eng.CancelCalls(); eng.Drain(); eng.Close() })
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sources := func() []Source {
		return []Source{
			{Kind: "mcp_servers", Name: "files", Owner: "mcp:files", State: "up", Err: "dial tcp: refused", Since: since},
			{Kind: "remotes", Name: "far", Owner: "remote:far", State: "retrying", Err: "no route", Skipped: 2},
		}
	}
	running(t, eng, reg, as("alice"))
	running(t, eng, reg, as("bob"))

	v := New(eng, reg, Config{Sources: sources})
	for _, c := range []struct {
		name       string
		ctx        context.Context
		admin      bool
		batchesFor []string
	}{
		{"a caller sees its own batches", as("alice", "dev"), false, []string{"alice"}},
		{"a caller with none sees none", as("carol"), false, nil},
		{"an administrator sees every caller's", as("dave", "admin"), true, []string{"alice", "bob"}},
		{"the anonymous caller is no administrator when authentication is on", context.Background(), false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := status(t, v, c.ctx)
			if got.GetAllCallers() != c.admin || (got.GetEngine() != nil) != c.admin {
				t.Errorf("all_callers %v, engine stats %v; want both %v", got.GetAllCallers(), got.GetEngine() != nil, c.admin)
			}
			if got.GetRevision() != reg.Snapshot().Revision() || got.GetToolCount() != 4 {
				t.Errorf("revision %q, %d tools; want %q, 4", got.GetRevision(), got.GetToolCount(), reg.Snapshot().Revision())
			}
			var callers []string
			for _, b := range got.GetBatches() {
				callers = append(callers, b.GetCallerId())
				if b.GetBatchId() == "" || b.GetCalls() != 1 || b.GetSessionId() != "s" || b.GetAge().AsDuration() < 0 || b.GetStarted() == nil ||
					len(b.GetRunning()) != int(b.GetCallsRunning()) || (len(b.GetRunning()) == 1 && (b.GetRunning()[0].GetCallId() != "a" || b.GetRunning()[0].GetToolName() != "sleep")) {
					t.Errorf("batch %v: want an ID, one call, session s, an age", b)
				}
			}
			if len(callers) != len(c.batchesFor) || (len(callers) > 0 && (callers[0] != c.batchesFor[0] || callers[len(callers)-1] != c.batchesFor[len(c.batchesFor)-1])) {
				t.Errorf("batches of %v, want %v", callers, c.batchesFor)
			}
			src := got.GetSources()
			if len(src) != 3 {
				t.Fatalf("sources %v, want builtin, files, far", src)
			}
			if b := src[0]; b.GetKind() != "builtin" || b.GetState() != toolwirev1.SourceState_SOURCE_STATE_STATIC || b.GetToolCount() != 3 {
				t.Errorf("built-in source %v, want static with 3 tools", b)
			}
			if f := src[1]; f.GetState() != toolwirev1.SourceState_SOURCE_STATE_UP || f.GetToolCount() != 1 || !f.GetSince().AsTime().Equal(since) {
				t.Errorf("files %v, want up with 1 tool since %v", f, since)
			}
			if f := src[2]; f.GetState() != toolwirev1.SourceState_SOURCE_STATE_RETRYING || f.GetToolCount() != 0 || f.GetSince() != nil || f.GetSkipped() != 2 || src[1].GetSkipped() != 0 {
				t.Errorf("far %v, want retrying with no tools, 2 skipped", f)
			}
			if !slices.Equal(src[0].GetTools(), []string{"echo", "fail", "sleep"}) || !slices.Equal(src[1].GetTools(), []string{"files_read"}) || len(src[2].GetTools()) != 0 {
				t.Errorf("tools by source %q, %q, %q; want the diag tools, files_read, none", src[0].GetTools(), src[1].GetTools(), src[2].GetTools())
			}
			if (src[2].GetLastError() != "") != c.admin {
				t.Errorf("far's last error %q shown to an administrator only: admin %v", src[2].GetLastError(), c.admin)
			}
		})
	}

	open := New(eng, reg, Config{Open: true})
	if got := status(t, open, context.Background()); !got.GetAllCallers() || len(got.GetBatches()) != 2 || len(got.GetSources()) != 1 {
		t.Errorf("with authentication off: %v; want every batch, the built-in source only", got)
	}
	if open.Admin(as("alice")) {
		t.Error("with authentication off, a named caller is an administrator; only the anonymous one is")
	}
}

// TestSourceToolsArePermitted: a source's tool names are those the caller
// may call, so the view reveals no tool a caller was not given.
func TestSourceToolsArePermitted(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Source("mcp:files").Set(tools.Tool{Name: "files_read", Description: "d",
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text(""), nil }}); err != nil {
		t.Fatal(err)
	}
	noFilesForCarol, err := policy.New(policy.Permissions{"carol": {Deny: []string{"files_read"}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Admission: noFilesForCarol})
	t.Cleanup(eng.Close)
	v := New(eng, reg, Config{Sources: func() []Source {
		return []Source{{Kind: "mcp_servers", Name: "files", Owner: "mcp:files", State: "up"}}
	}})
	for caller, want := range map[string][]string{"alice": {"files_read"}, "carol": nil} {
		src := status(t, v, as(caller)).GetSources()
		if len(src) != 2 || !slices.Equal(src[1].GetTools(), want) {
			t.Errorf("%s sees the files source's tools %v; want %v", caller, src, want)
		}
	}
}

// TestBatchesAreCapped: a view lists the oldest Config.MaxBatches batches
// and counts them all, so one GetServerStatus costs and sends the same
// however many batches run. 10,000 held batches made a 470 KB answer
// that took 30 ms (p50) to build; some 90,000 would pass
// max_message_bytes, failing the call after all that work.
func TestBatchesAreCapped(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{})
	t.Cleanup(func() { eng.CancelCalls(); eng.Drain(); eng.Close() })
	for range 3 {
		running(t, eng, reg, as("alice"))
	}
	running(t, eng, reg, as("bob"))
	// The oldest n of ctx's batches (every caller's when all is true).
	oldest := func(ctx context.Context, all bool, n int) (ids []string) {
		l, _ := eng.Batches(ctx, all, 0)
		for _, b := range l[:min(n, len(l))] {
			ids = append(ids, b.ID)
		}
		return ids
	}

	v := New(eng, reg, Config{MaxBatches: 2})
	for _, c := range []struct {
		name  string
		ctx   context.Context
		want  []string
		count int32
	}{
		{"a caller's own", as("alice"), oldest(as("alice"), false, 2), 3},
		{"an administrator's", as("dave", "admin"), oldest(as("dave"), true, 2), 4},
		{"a caller with fewer", as("bob"), oldest(as("bob"), false, 2), 1},
	} {
		got := status(t, v, c.ctx)
		var listed []string
		for _, b := range got.GetBatches() {
			listed = append(listed, b.GetBatchId())
		}
		if !slices.Equal(listed, c.want) || got.GetBatchCount() != c.count {
			t.Errorf("%s: batches %q of %d, want %q of %d", c.name, listed, got.GetBatchCount(), c.want, c.count)
		}
	}
	if got := status(t, New(eng, reg, Config{Open: true}), context.Background()); len(got.GetBatches()) != 4 || got.GetBatchCount() != 4 {
		t.Errorf("by default: %d batches listed of %d, want 4 of 4", len(got.GetBatches()), got.GetBatchCount())
	}
}

// TestStatusTakesItsTurn: over a catalog of more than 1,000 tools a view
// is a scan like a listing, and waits for a scan slot (Engine.Scan).
// Before, 16 callers polling it over 40,000 tools (1.1 MB and 84 ms
// each) took ExecuteBatch calls beside them from 33,122 in 8 s (p99
// 7.3 ms) to 14,010 (p99 38 ms).
func TestStatusTakesItsTurn(t *testing.T) {
	t.Parallel()
	var many []tools.Tool
	for i := range 1001 {
		many = append(many, tools.Tool{Name: fmt.Sprintf("t%04d", i), Description: "d",
			Handler: func(context.Context, *tools.Call) (*tools.Result, error) { return tools.Text(""), nil }})
	}
	reg, err := tools.NewRegistry(many...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{MaxQueueWait: time.Millisecond}, engine.Deps{})
	t.Cleanup(eng.Close)
	// Take every slot, one caller each, until one is refused.
	taken := 0
	for ; ; taken++ {
		release, err := eng.Scan(as(fmt.Sprintf("c%d", taken)), reg.Snapshot())
		if err != nil {
			if engine.CodeOf(err) != engine.ResourceExhausted {
				t.Fatalf("a scan past the slots: %v, want ResourceExhausted", err)
			}
			break
		}
		defer release()
	}
	if _, err := New(eng, reg, Config{}).Status(as("carol")); engine.CodeOf(err) != engine.ResourceExhausted {
		t.Errorf("a view while all %d scan slots are taken: %v; want ResourceExhausted", taken, err)
	}
}
