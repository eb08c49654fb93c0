package connlimit

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/internal/testing/logbuf"
)

func TestBound(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(raw, 2, "max_connections", nil)
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	s1, s2 := <-accepted, <-accepted
	_ = s2
	// The third is closed by the server at once: its client reads EOF.
	c3 := dial()
	c3.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c3.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("a connection past the bound: read %v, want EOF (closed by the server)", err)
	}
	if got := l.Refused(); got != 1 {
		t.Fatalf("refused %d, want 1", got)
	}
	if got := l.Open(); got != 2 {
		t.Fatalf("open %d, want 2", got)
	}
	// Closing one frees its place, once however often it is closed.
	s1.Close()
	s1.Close()
	if got := l.Open(); got != 1 {
		t.Fatalf("open %d after a close, want 1", got)
	}
	dial()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("a connection within the bound again was not accepted")
	}
}

func TestNoBound(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(raw, 0, "max_connections", nil)
	defer l.Close()
	for range 5 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	if l.Open() != 5 || l.Refused() != 0 {
		t.Fatalf("open %d refused %d, want 5 and 0", l.Open(), l.Refused())
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// failing is a listener whose Accept fails with err until it is given a
// connection to return.
type failing struct {
	net.Listener
	conns chan net.Conn
	err   error
}

func (f *failing) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	default:
		return nil, f.err
	}
}

// TestAcceptFailuresLogged: a server out of file descriptors cannot
// accept; the servers above retry with a backoff and logged nothing an
// operator sees (net/http's ErrorLog is at debug, grpc-go's at none). The
// listener says so once however often it fails, and once that it accepts
// again.
func TestAcceptFailuresLogged(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var log logbuf.Buffer
	f := &failing{Listener: raw, conns: make(chan net.Conn, 1), err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}}
	l := Listen(f, 0, "", slog.New(slog.NewTextHandler(&log, nil)))
	for range 1000 {
		if _, err := l.Accept(); !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("Accept: %v; want EMFILE, as the listener's", err)
		}
	}
	a, b := net.Pipe()
	defer b.Close()
	f.conns <- a
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	got := log.String()
	if n := strings.Count(got, "cannot accept connections: out of file descriptors"); n != 1 {
		t.Errorf("%d lines say the listener cannot accept; want 1:\n%s", n, got)
	}
	if !strings.Contains(got, "failed=1 ") || !strings.Contains(got, "accepting connections again") || !strings.Contains(got, "failed=1000") {
		t.Errorf("the log does not count the failures and say it recovered:\n%s", got)
	}
}
