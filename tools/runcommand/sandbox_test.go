package runcommand_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/toolwire/toolwire/internal/testenv"
	"github.com/toolwire/toolwire/tools/runcommand"
	"github.com/toolwire/toolwire/tools/runcommand/sandbox"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// newSandbox returns a sandbox that enforces every restriction, or reports
// the kernel's lack of one as missing.
func newSandbox(tb testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	tb.Helper()
	cfg.Mode = sandbox.Required
	sb, _, err := sandbox.New(cfg)
	if err != nil {
		testenv.Missing(tb, "a kernel sandbox ("+err.Error()+")")
	}
	return sb
}

func TestSandboxSmoke(t *testing.T) {
	t.Parallel()
	c := wt.NewCorpus(t)
	tool := runcommand.New(c.WS, runcommand.Options{Shell: true, Sandbox: newSandbox(t, sandbox.Config{MemoryBytes: 256 << 20})})
	for _, cmd := range []string{
		`echo hello; pwd; echo $TMPDIR; echo x > $TMPDIR/a && cat $TMPDIR/a; echo y > f && cat f`,
		fmt.Sprintf("grep -a Landlock /proc/%d/status; head -c 30 /proc/%d/environ; echo; head -c 30 /proc/%d/environ; echo; grep -a Landlock /proc/self/status", os.Getpid(), os.Getpid(), os.Getppid()),
		`cat /proc/1/environ | head -c 50; echo; head -c 10 /proc/1/mem; ls /proc/1/fd | head -3; grep Seccomp /proc/self/status; cat /proc/self/attr/current 2>&1; kill -CONT 1`,
		`cat ../ws-other/secret.txt`,
		`kill -9 $PPID`,
		`sleep 3333 & echo started`,
		`python3 -c 'import socket; socket.create_connection(("127.0.0.1", 22))'`,
	} {
		res := wt.Call(t, tool, `{"command":`+wt.Quote(cmd)+`}`)
		t.Logf("%s\n→ error %v\n%s\n%s", cmd, res.IsError, wt.Text(res), res.Details)
	}
}
