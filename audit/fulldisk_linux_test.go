package audit

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
)

// TestFullDisk fills a real filesystem under a required trail, with
// batches of parallel calls whose lines are a few kilobytes: every call
// that ran has its request entry in the file; once the entries cannot be
// written, calls are refused NOT_PERMITTED naming the audit trail and do
// not run; every line in the file is whole JSON (a write the disk cut
// short is cut back off the file, never glued to the next line); and once
// room is made, calls run again.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	dir := testenv.SmallFS(t, 64<<10)
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 16<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.log")
	trail, err := Open(Config{Log: path, Required: true, Arguments: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	rt := &ranTool{}
	e, reg := testEngine(t, trail, rt.tool())
	// 1,500 to 3,000 bytes of arguments: lines of uneven lengths, so that
	// some write meets the end of the disk part way.
	args := func(i int) string { return `{"pad":"` + strings.Repeat("p", 1500+(i*337)%1500) + `"}` }

	refused, next := 0, 0
	for batch := 0; refused < 8 && batch < 100; batch++ {
		var calls []*toolwirev1.ToolCall
		for range 4 {
			calls = append(calls, tc(fmt.Sprint(next), "ran", args(next)))
			next++
		}
		for id, r := range run(t, e, reg, "alice", calls...) {
			switch {
			case !r.GetIsError():
			case refusedForAudit(r):
				refused++
				if rt.ran()[id] {
					t.Errorf("call %s ran and was refused", id)
				}
			default:
				t.Errorf("call %s: %v", id, r)
			}
		}
	}
	ran := rt.ran()
	if refused == 0 || len(ran) == 0 {
		t.Fatalf("%d calls ran, %d were refused, of %d; want the disk to fill part way", len(ran), refused, next)
	}
	if _, _, failed := trail.Stats(); failed == 0 {
		t.Error("no failed line was counted")
	}

	// Room is made: calls run again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, reg, "alice", tc("after", "ran", `{}`))["after"]; r.GetIsError() {
		t.Errorf("a call once there is room again: %v", r)
	}
	if err := trail.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := parseLines(t, "the trail on a full disk", b)
	requested := map[string]bool{}
	for _, l := range lines {
		if l.Stage == StageRequest {
			requested[l.CallID] = true
		}
	}
	for id := range rt.ran() {
		if !requested[id] {
			t.Errorf("call %s ran with no request entry in the trail", id)
		}
	}
	t.Logf("%d calls: %d ran, %d refused; %d lines in %d bytes", next+1, len(rt.ran()), refused, len(lines), len(b))
}
