package httpserve_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolwire/toolwire/service/httpserve"
)

// The port keeps at most http_max_connections open: a client keeping one
// alive holds its place, one past the bound is closed at once, and a
// closed one frees its place.
func TestMaxConnections(t *testing.T) {
	s := httpserve.New(httpserve.Config{MaxConnections: 1}, nil, nil)
	s.Handle("POST /echo", echo(), nil)
	base, _ := serve(t, s)
	addr := strings.TrimPrefix(base, "http://")
	tr := &http.Transport{MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	post := func() error {
		resp, err := hc.Post(base+"/echo", "text/plain", strings.NewReader("hi"))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := post(); err != nil {
		t.Fatal(err)
	}
	// The client keeps its connection alive: a second is past the bound.
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a second connection with http_max_connections 1: read %v, want it closed by the server", err)
	}
	if err := post(); err != nil {
		t.Fatalf("the kept connection after a refusal: %v", err)
	}
	// Closing the kept one frees its place.
	tr.CloseIdleConnections()
	var last error
	for range 50 { // the server sees the close a moment later
		if last = post(); last == nil {
			return
		}
		tr.CloseIdleConnections()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("a new connection once the kept one closed: %v", last)
}
