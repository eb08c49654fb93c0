package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// handedOut is when listenable last gave this process each port. The
// kernel may give a port closed a moment ago to the next listener, so two
// picks in a row can be equal before either server has bound it: a cluster
// test once started two of its nodes on one port, and built its cluster of
// the one that answered. A port is held back for handedOutFor, long past
// the bind of a server started on it (whose port the kernel then offers
// no one).
var handedOut = struct {
	sync.Mutex
	at map[int]time.Time
}{at: map[int]time.Time{}}

const handedOutFor = time.Minute

// listenable returns a loopback port nothing listened on a moment ago that
// this process has not handed out within handedOutFor.
func listenable() (int, error) {
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		handedOut.Lock()
		last, held := handedOut.at[port]
		fresh := !held || time.Since(last) > handedOutFor
		if fresh {
			handedOut.at[port] = time.Now()
		}
		handedOut.Unlock()
		if fresh {
			return port, nil
		}
	}
	return 0, errors.New("every loopback port the kernel offered in 1,000 tries was handed out within the last minute")
}

// FreePort returns a loopback address (127.0.0.1:port) for a server a test
// starts: nothing listened on its port a moment ago, and no other FreePort
// of this process returned it. Another process may still take it first; a
// server that then cannot bind it fails to start, which the test sees.
func FreePort(tb testing.TB) string {
	tb.Helper()
	port, err := listenable()
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// redisProcess is a redis-server this package started.
type redisProcess struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it has exited and been reaped
}

// errPortTaken is launchRedis's error for a server that could not bind a
// port picked for it: another process took it since.
var errPortTaken = errors.New("its port was taken")

// launchRedis starts redis-server with args, which bind it to addr and log
// to logFile, and returns once addr answers as this very process (INFO's
// process_id), not merely once something answers there: a port picked for
// it may have been taken since by another server, which would answer in
// its place. It fails with errPortTaken if the server exits because it
// cannot bind a port, with its log's end for any other exit or silence.
func launchRedis(addr, logFile string, args []string) (*redisProcess, error) {
	// What this start logs follows what earlier starts in its directory
	// logged.
	var from int64
	if fi, err := os.Stat(logFile); err == nil {
		from = fi.Size()
	}
	logged := func() string {
		b, _ := os.ReadFile(logFile)
		return string(b[min(from, int64(len(b))):])
	}
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &redisProcess{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	pid := "process_id:" + strconv.Itoa(cmd.Process.Pid)
	give := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.exited:
			log := logged()
			if strings.Contains(log, "Address already in use") {
				return nil, fmt.Errorf("redis-server on %s: %w", addr, errPortTaken)
			}
			return nil, fmt.Errorf("redis-server on %s exited at start (%s); its log ends:\n%s", addr, cmd.ProcessState, tail(log, 10))
		case <-time.After(10 * time.Millisecond):
		}
		if info, err := command(addr, "INFO", "server"); err == nil && strings.Contains(info, pid+"\r\n") {
			return p, nil
		}
		if time.Now().After(give) {
			p.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer within 10 s; its log ends:\n%s", addr, tail(logged(), 10))
		}
	}
}

// kill ends the process (SIGKILL, after SIGCONT so that a frozen one can
// die) and waits until it has.
func (p *redisProcess) kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.exited
}

// signal sends the process sig.
func (p *redisProcess) signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// retryPorts runs start up to 5 times while it fails with errPortTaken,
// each time on ports picked afresh.
func retryPorts(tb testing.TB, start func() error) error {
	tb.Helper()
	var err error
	for range 5 {
		if err = start(); !errors.Is(err, errPortTaken) {
			return err
		}
		tb.Logf("%v: starting it again on other ports", err)
	}
	return err
}

// tail is the last n lines of text.
func tail(text string, n int) string {
	all := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-n):], "\n")
}

// logPath is where a redis-server started in dir logs.
func logPath(dir string) string { return filepath.Join(dir, "redis.log") }
