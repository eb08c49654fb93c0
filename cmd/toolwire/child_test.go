package main

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
)

// child is a toolwire binary running as a child process; its log (stdout
// and stderr) is collected as it comes.
type child struct {
	cmd     *exec.Cmd
	addr    string         // from its listening line
	log     *logbuf.Buffer // everything it has logged so far
	logDone chan struct{}
	stopped bool
}

// startChild starts cmd, returns once it has logged the address it listens
// on, and keeps draining its log so it never blocks on a full pipe. Unless
// stop is called, the process is killed when the test ends.
func startChild(t *testing.T, cmd *exec.Cmd) *child {
	t.Helper()
	output, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, log: &logbuf.Buffer{}, logDone: make(chan struct{})}
	t.Cleanup(func() {
		if !c.stopped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	addrc := make(chan string, 1)
	go func() {
		defer close(c.logDone)
		sc := bufio.NewScanner(output)
		for sc.Scan() {
			c.log.Write([]byte(sc.Text() + "\n"))
			if addr, ok := listenAddr(sc.Text()); ok {
				addrc <- addr
			}
		}
	}()
	select {
	case c.addr = <-addrc:
	case <-time.After(testTimeout):
		t.Fatalf("the binary did not report its address:\n%s", c.log)
	}
	return c
}

// stop sends SIGTERM and waits for the process to exit; it returns the
// whole log and the exit error.
func (c *child) stop(t *testing.T) (string, error) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-c.logDone // the pipe closes when the process exits
	err := c.cmd.Wait()
	c.stopped = true
	return c.log.String(), err
}
