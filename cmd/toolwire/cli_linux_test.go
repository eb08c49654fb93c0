package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: a program writing to tty sees a
// terminal, and what it writes is read from pty.
func openPTY(t *testing.T) (pty, tty *os.File) {
	t.Helper()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skip("no pseudo-terminals:", err)
	}
	t.Cleanup(func() { pty.Close() })
	if err := unix.IoctlSetPointerInt(int(pty.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal("unlockpt:", err)
	}
	n, err := unix.IoctlGetInt(int(pty.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal("ptsname:", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return pty, tty
}

// TestBinaryClient runs the client commands as a real process: on a
// terminal, progress is one line redrawn in place; Ctrl-C prints
// "cancelled" and exits 130; serve logs text to a terminal.
func TestBinaryClient(t *testing.T) {
	bin := buildToolwire(t)
	t.Parallel()
	s := startServe(t, "--diag")

	t.Run("progress on a terminal", func(t *testing.T) {
		pty, tty := openPTY(t)
		cmd := exec.Command(bin, "call", "--addr", s.addr, "sleep", `{"ms":300}`)
		cmd.Stderr = tty
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		tty.Close()
		screen, _ := io.ReadAll(pty) // ends with EIO once tty is closed
		got := string(screen)
		reports := strings.Count(got, "\r\x1b[Kprogress ")
		if reports < 2 || strings.Count(got, "\n") != 1 || !regexp.MustCompile(`\r\x1b\[Kfinished call-1 in \d+ms\r?\n$`).MatchString(got) {
			t.Errorf("terminal output %q; want 2+ reports redrawn on one line, then one finished line", got)
		}
	})

	t.Run("Ctrl-C", func(t *testing.T) {
		stderr := &logbuf.Buffer{}
		cmd := exec.Command(bin, "call", "--addr", s.addr, "sleep", `{"ms":60000}`)
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the call to start", func() bool { return strings.Contains(stderr.String(), "started") })
		start := time.Now()
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.HasSuffix(stderr.String(), "\ncancelled\n") {
			t.Errorf("after SIGINT: %v, exit code %d, stderr %q; want 130 and \"cancelled\"", err, code, stderr.String())
		}
		if d := time.Since(start); d > testTimeout/2 {
			t.Errorf("took %v to stop after SIGINT", d)
		}
	})

	t.Run("serve logs text to a terminal", func(t *testing.T) {
		pty, tty := openPTY(t)
		cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--no-workspace", "--diag")
		cmd.Stderr = tty
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		screen := &logbuf.Buffer{}
		go io.Copy(screen, pty)
		waitFor(t, "the listening line", func() bool { return strings.Contains(screen.String(), "toolwire listening on") })
		if got := screen.String(); !strings.HasPrefix(got, "time=") || strings.Contains(got, `{"time"`) {
			t.Errorf("serve's log on a terminal:\n%s\nwant slog's text format", got)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
}
