package workspacetools_test

import (
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	"github.com/toolwire/toolwire/tools/workspacetools"
)

// TestOpenWarnsOfSmallNproc: under a server whose RLIMIT_NPROC is 40 its
// commands together may hold 20 processes, far below max_processes
// (1024); serve said nothing of it, and a command that could not fork was
// told only of max_processes. Not parallel: it lowers the process's soft
// RLIMIT_NPROC while it opens (as root it is not enforced, as another uid
// only for new processes).
func TestOpenWarnsOfSmallNproc(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 40
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &low); err != nil {
		t.Skip("cannot lower RLIMIT_NPROC:", err)
	}
	var log logbuf.Buffer
	ws, err := workspacetools.Open(workspacetools.Config{Workspace: t.TempDir(), RunCommand: workspacetools.RunCommandConfig{Enabled: true}, Sandbox: sandbox.Config{Mode: sandbox.Auto}},
		workspacetools.Env{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if want := "every command together may hold 20 processes and threads, fewer than sandbox.max_processes (1024)"; !strings.Contains(log.String(), want) {
		t.Errorf("log:\n%s\nwant %q in it", log.String(), want)
	}
}
