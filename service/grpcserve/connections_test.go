package grpcserve

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// closedByServer reports whether the server closed c: a read within wait
// ends in EOF or a reset rather than its deadline. What the server sends
// first (its HTTP/2 settings) is read past.
func closedByServer(t *testing.T, c net.Conn, wait time.Duration) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
			return true
		default:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false
			}
			t.Fatalf("read: %v", err)
		}
	}
}

// The port keeps at most max_connections open: one past it is closed at
// once, and one closed frees its place. Without the bound, idle
// connections (about 50 KiB each) pile up as long as clients open them.
func TestMaxConnections(t *testing.T) {
	s := newServedSurface(t, engine.Config{}, Config{Limits: Limits{MaxConnections: 2}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := s.client(t), s.client(t)
	for _, c := range []toolwirev1.ToolServiceClient{a, b} {
		if _, err := c.ListTools(ctx, &toolwirev1.ListToolsRequest{}); err != nil {
			t.Fatalf("a connection within the bound: %v", err)
		}
	}
	extra, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedByServer(t, extra, 10*time.Second) {
		t.Fatal("a third connection with max_connections 2 was kept open")
	}
	if got := s.srv.conns.refusedCount(); got != 1 {
		t.Fatalf("refused %d connections, want 1", got)
	}
	// The two kept connections still work.
	if _, err := a.ListTools(ctx, &toolwirev1.ListToolsRequest{}); err != nil {
		t.Fatalf("a kept connection after a refusal: %v", err)
	}
}

// A connection that sends nothing is closed after handshake_timeout, not
// gRPC's 120s.
func TestHandshakeTimeout(t *testing.T) {
	s := newServedSurface(t, engine.Config{}, Config{Limits: Limits{HandshakeTimeout: 200 * time.Millisecond}})
	silent, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !closedByServer(t, silent, 15*time.Second) {
		t.Fatal("a connection that sent nothing was kept past handshake_timeout")
	}
	// Clients that speak go on being served.
	if _, err := s.client(t).ListTools(context.Background(), &toolwirev1.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestConnectionLimitsDefaults(t *testing.T) {
	l := Limits{}.withDefaults(time.Minute)
	if l.MaxConnections != DefaultMaxConnections || l.HandshakeTimeout != 10*time.Second {
		t.Fatalf("defaults: max_connections %d, handshake_timeout %v", l.MaxConnections, l.HandshakeTimeout)
	}
	if l := (Limits{MaxConnections: -1}).withDefaults(time.Minute); l.MaxConnections != -1 {
		t.Fatalf("max_connections -1 (no bound) became %d", l.MaxConnections)
	}
}
