package workspace_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/tools/workspace"
	"github.com/toolwire/toolwire/tools/workspace/usage"
)

// TestRoomMeasuredOnce checks that a session's writes are held to its
// bound from a measure their own writes keep, not a walk per write: a file
// put in the folder behind the workspace's back goes unseen until Changed
// (what run_command calls after each command), and then counts.
func TestRoomMeasuredOnce(t *testing.T) {
	t.Parallel()
	s, _ := openSessions(t, workspace.SessionOptions{Limits: workspace.Limits{MaxBytes: 1 << 20}})
	ws, release, err := s.Resolve(sessionCall("", "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := ws.WriteFile("a.txt", make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Dir(), "big"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.WriteFile("b.txt", []byte("b")); err != nil {
		t.Errorf("a small write, the folder's measure from before: %v; want it made without a walk", err)
	}
	ws.Changed()
	_, err = ws.WriteFile("c.txt", []byte("c"))
	if !errors.Is(err, workspace.ErrNoRoom) || !strings.Contains(err.Error(), "the workspace holds 2.") {
		t.Errorf("a write after Changed, 2 MiB more in the folder: %v; want ErrNoRoom saying what it holds", err)
	}
}

// TestRoomConcurrentWrites writes 32 KiB files from 8 goroutines at once,
// 8 each, into one session bounded at 512 KiB: each write's check and
// charge are one step, so together they stay within the bound.
func TestRoomConcurrentWrites(t *testing.T) {
	t.Parallel()
	const bound = 512 << 10
	s, _ := openSessions(t, workspace.SessionOptions{Limits: workspace.Limits{MaxBytes: bound}})
	ws, release, err := s.Resolve(sessionCall("", "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 8 {
				_, _ = ws.WriteFile(filepath.Join("g"+strconv.Itoa(g), strconv.Itoa(i)), make([]byte, 32<<10))
			}
		})
	}
	wg.Wait()
	if held := usage.Measure([]string{ws.Dir()}, 0, 0).Bytes; held > bound {
		t.Errorf("the session's folder holds %d bytes after 64 concurrent writes of 32 KiB; want at most %d", held, bound)
	}
}
