package diag

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/tools"
)

func registry(t *testing.T) *tools.Snapshot {
	t.Helper()
	r, err := tools.NewRegistry(Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	return r.Snapshot()
}

func run(t *testing.T, ctx context.Context, name, args string, report func(tools.Progress)) (*tools.Result, error) {
	t.Helper()
	tool, ok := registry(t).Lookup(name)
	if !ok {
		t.Fatalf("no tool %q", name)
	}
	valid, err := tool.ValidateArguments(args)
	if err != nil {
		t.Fatalf("ValidateArguments: %v", err)
	}
	return tool.Handler(ctx, tools.NewCall("1", name, valid, report))
}

func TestDeclarations(t *testing.T) {
	t.Parallel()
	snap := registry(t)
	for name, readOnly := range map[string]bool{"echo": true, "sleep": true, "fail": false} {
		tool, ok := snap.Lookup(name)
		if !ok || tool.Annotations.ReadOnly != readOnly || tool.Description == "" {
			t.Errorf("%s: %+v, want read_only=%v and a description", name, tool, readOnly)
		}
	}
	sleep, _ := snap.Lookup("sleep")
	for _, bad := range []string{`{}`, `{"ms":"1"}`, `{"ms":1.5}`, `{"ms":-1}`, `{"ms":86400001}`} {
		if _, err := sleep.ValidateArguments(bad); err == nil {
			t.Errorf("sleep accepted %s", bad)
		}
	}
}

func TestEcho(t *testing.T) {
	t.Parallel()
	res, err := run(t, context.Background(), "echo", `{"text":"héllo"}`, nil)
	if err != nil || res.Content[0].Text != "héllo" || string(res.StructuredContent) != `{"text":"héllo"}` {
		t.Errorf("echo = %+v, %v", res, err)
	}
}

func TestFail(t *testing.T) {
	t.Parallel()
	_, err := run(t, context.Background(), "fail", `{"message":"broken"}`, nil)
	if err == nil || err.Error() != "broken" {
		t.Errorf("fail error = %v, want broken", err)
	}
}

func TestSleepReportsProgressAtLeastEvery100ms(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var times []time.Time
	start := time.Now()
	res, err := run(t, context.Background(), "sleep", `{"ms":350}`, func(p tools.Progress) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		if p.Total == nil || *p.Total != 350 {
			t.Errorf("progress total %v, want 350", p.Total)
		}
	})
	if err != nil || string(res.StructuredContent) == "" {
		t.Fatalf("sleep = %+v, %v", res, err)
	}
	if time.Since(start) < 350*time.Millisecond {
		t.Error("sleep returned early")
	}
	// The tick interval is ProgressInterval; count rather than time the gaps,
	// since a loaded machine may delay a tick.
	if len(times) < 4 { // at 0ms, then at least at 100, 200 and 300ms
		t.Errorf("%d reports in 350ms, want at least 4", len(times))
	}
	if ProgressInterval > 100*time.Millisecond {
		t.Errorf("ProgressInterval %s is over 100ms", ProgressInterval)
	}
}

func TestSleepHonoursCancellation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := run(t, ctx, "sleep", `{"ms":600000}`, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
