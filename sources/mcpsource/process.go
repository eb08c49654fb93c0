package mcpsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A stdio server runs as the leader of a process group of its own, and
// nothing it starts there outlives it:
//
//   - when it exits, on its own or not, what is left of its group is
//     killed at once (its helpers held its stdout and stderr open, so the
//     gateway never saw the connection end: a call in flight waited for
//     its deadline, and the dead server's tools stayed offered);
//   - closing its session closes its stdin, then, as MCP says, signals
//     SIGTERM and SIGKILL if it does not exit, to the whole group;
//   - if toolwire itself dies, the kernel kills the server (Pdeathsig, on
//     Linux).
//
// A process that leaves the group (setsid, as daemons do) is out of reach
// of all three; it can still hold the server's stdout and stderr open.
// So once the server has exited, its stdout is read for exitGrace more
// (what it wrote before it exited), then the connection ends, and its
// stderr is logged as long: the session ends, and its calls fail, within
// exitGrace of the exit, however long such a process lives.
//
// The SDK's CommandTransport does none of it: it signals the server alone,
// and waits for the process (exec.Cmd.Wait, which also waits for stderr to
// close) only when the session is closed, without a bound.

// exitGrace is how long a stdio server's stdout and stderr are read after
// it has exited.
const exitGrace = 500 * time.Millisecond

// stdioTransport connects to a stdio server it starts.
type stdioTransport struct {
	cmd *exec.Cmd
	// terminate is how long the server has to exit after its stdin is
	// closed, and after SIGTERM.
	terminate time.Duration
	// grace is how long a message begun may take to finish once its
	// call has ended (the server's ping_timeout; see process.write).
	grace time.Duration

	log  *slog.Logger // the server's, for lines of its stdout that are no messages
	p    *process     // once Connect has started it
	conn *stdioConn   // its connection
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	p, err := startProcess(t.cmd, t.terminate)
	if err != nil {
		return nil, err
	}
	t.p, t.conn = p, newStdioConn(p, t.log, t.grace)
	return t.conn, nil
}

// exitCause says how the server ended, when it exited of itself with an
// error (a status other than 0, a signal) within exitGrace: why a session
// failed to start, where the SDK says only that the connection closed
// ("client is closing: EOF"). A server still running, or one that exited
// cleanly, has nil.
func (t *stdioTransport) exitCause() error {
	if t.p == nil {
		return nil
	}
	select {
	case <-t.p.exited:
	case <-time.After(exitGrace):
		return nil
	}
	if t.p.err == nil || errors.Is(t.p.err, exec.ErrWaitDelay) {
		return nil
	}
	return fmt.Errorf("the server exited: %v", t.p.err)
}

// stdoutReader reads a server's stdout; the deadline set when the server
// exited is named for what it means. Closing it does nothing: p does.
type stdoutReader struct{ f *os.File }

// errHeldOpen is what reading a server's stdout fails with when a process
// it started holds it open after it has exited.
var errHeldOpen = errors.New("the server exited, and a process it started keeps its stdout open")

func (r stdoutReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = errHeldOpen
	}
	return n, err
}

func (stdoutReader) Close() error { return nil }

// process is a running stdio server.
type process struct {
	cmd       *exec.Cmd
	stdin     *os.File // write end; the server's end is closed once it has started
	stdout    *os.File // read end; the server's end is closed once it has started
	terminate time.Duration
	ownGroup  bool // the server leads a process group of its own

	mu   sync.Mutex
	gone bool // the server has exited: its ID may no longer be signalled

	exited chan struct{} // closed once the server has exited and been reaped
	err    error         // cmd.Wait's, once exited is closed
}

// startProcess starts cmd, a process group of its own, and watches for its
// exit.
func startProcess(cmd *exec.Cmd, terminate time.Duration) (*process, error) {
	p := &process{cmd: cmd, terminate: terminate, exited: make(chan struct{})}
	// Keep what SysProcAttr already holds (a caller may drop privileges or
	// start a session there).
	attr := cmd.SysProcAttr
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	switch {
	case attr.Setsid: // a session of its own leads a group of its own
		p.ownGroup = true
	case !attr.Setpgid:
		attr.Setpgid, attr.Pgid = true, 0
		p.ownGroup = true
	default:
		p.ownGroup = attr.Pgid == 0
	}
	setDeathSignal(attr)
	cmd.SysProcAttr = attr
	// Bounds Wait's wait for stderr once the server has exited.
	cmd.WaitDelay = exitGrace
	// stdout is a pipe of the gateway's, not StdoutPipe: Wait would close
	// it as soon as the server has exited, before what it wrote last is read.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	p.stdout = r
	// stdin too, not StdinPipe: a write to it can be given a deadline
	// (see write).
	ir, iw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	cmd.Stdin = ir
	p.stdin = iw
	started := make(chan error, 1)
	go p.run(started)
	err = <-started
	w.Close() // the server has its own copies
	ir.Close()
	if err != nil {
		r.Close()
		iw.Close()
		return nil, err
	}
	return p, nil
}

// run starts the process and waits for it to exit; then it kills what is
// left of its group, bounds the reading of its stdout, and reaps it.
func (p *process) run(started chan<- error) {
	// The kernel sends Pdeathsig when the thread that started the process
	// ends, not the process: this goroutine keeps its thread for as long
	// as the server runs, and the thread goes when it returns.
	runtime.LockOSThread()
	if err := p.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	pid := p.cmd.Process.Pid
	zombie := waitExit(pid)
	if zombie {
		// Exited, not yet reaped: its ID, the group's, is not reused
		// until Wait.
		p.mu.Lock()
		p.gone = true
		p.mu.Unlock()
		if p.ownGroup {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		_ = p.stdout.SetReadDeadline(time.Now().Add(exitGrace))
	}
	p.err = p.cmd.Wait()
	p.mu.Lock()
	p.gone = true
	p.mu.Unlock()
	if !zombie { // Wait returned within exitGrace of the exit
		_ = p.stdout.SetReadDeadline(time.Now().Add(exitGrace))
	}
	close(p.exited)
}

// write writes b to the server's stdin, stopping when ctx ends first,
// with what was written: a server that reads nothing fills the pipe, and
// a pipe's write heeds no context, only a deadline. A message already
// begun is finished if the server reads it within grace, since what
// follows a message cut short could not be parsed.
func (p *process) write(ctx context.Context, b []byte, grace time.Duration) (int, error) {
	if ctx.Done() == nil {
		return p.stdin.Write(b)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = p.stdin.SetWriteDeadline(time.Now())
		close(fired)
	})
	n, err := p.stdin.Write(b)
	if stop() {
		return n, err
	}
	<-fired
	if n > 0 && n < len(b) && errors.Is(err, os.ErrDeadlineExceeded) {
		_ = p.stdin.SetWriteDeadline(time.Now().Add(grace))
		var m int
		m, err = p.stdin.Write(b[n:])
		n += m
	}
	_ = p.stdin.SetWriteDeadline(time.Time{}) // for the next write
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w, then %v more without the server reading", ctx.Err(), grace)
		if n == 0 {
			err = ctx.Err()
		}
	}
	return n, err
}

// Close ends the server as MCP says: it closes its stdin, and signals
// SIGTERM, then SIGKILL, each after terminate, until it exits. It returns
// once the server has exited and been reaped, and its stdout is closed.
func (p *process) Close() error {
	_ = p.stdin.Close()
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != 0 {
			p.signal(sig)
		}
		timer := time.NewTimer(p.terminate)
		select {
		case <-p.exited:
			timer.Stop()
			p.stdout.Close()
			var exit *exec.ExitError
			if errors.As(p.err, &exit) || errors.Is(p.err, exec.ErrWaitDelay) {
				return nil // how it ended is not the closing's error
			}
			return p.err
		case <-timer.C:
		}
	}
	return fmt.Errorf("the MCP server (pid %d) did not exit %v after SIGKILL", p.cmd.Process.Pid, p.terminate)
}

// signal sends sig to the server's group, or to the server alone when it
// shares a group, unless it has exited.
func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return
	}
	pid := p.cmd.Process.Pid
	if p.ownGroup {
		pid = -pid
	}
	_ = syscall.Kill(pid, sig)
}
