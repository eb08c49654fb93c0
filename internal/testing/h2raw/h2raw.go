// Package h2raw sends what a hostile HTTP/2 client sends, past what
// well-behaved clients (grpc-go's, net/http's) would refuse to send.
package h2raw

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Headers sends one gRPC request for path (a method taking an empty
// message) with fields metadata fields of size bytes each over a raw
// HTTP/2 connection to addr, as a client that ignores the server's
// SETTINGS_MAX_HEADER_LIST_SIZE would, and says how
// the server answered: "RST_STREAM <code>", "GOAWAY <code>", "closed",
// "served" (response headers came), or "no answer" (none in 20 s).
func Headers(t testing.TB, addr, path string, fields, size int) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: addr},
		{Name: ":path", Value: path},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: strings.Repeat("x", size)}); err != nil {
			t.Fatal(err)
		}
	}
	// Written beside the reads: the server may answer, or close the
	// connection, before the last fragment.
	go func() {
		const frag = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
		b := block.Bytes()
		first := b[:min(frag, len(b))]
		b = b[len(first):]
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(b) == 0}) != nil {
			return
		}
		for len(b) > 0 {
			next := b[:min(frag, len(b))]
			b = b[len(next):]
			if fr.WriteContinuation(1, len(b) == 0, next) != nil {
				return
			}
		}
		_ = fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}) // the request: an empty message
	}()
	for {
		f, err := fr.ReadFrame()
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			return "no answer"
		}
		if err != nil {
			return "closed"
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.HeadersFrame:
			if f.StreamID == 1 {
				return "served"
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// Streams opens n gRPC streams for path (a server-streaming method taking
// an empty message) at once on one raw HTTP/2 connection to addr, as a
// client that ignores the server's SETTINGS_MAX_CONCURRENT_STREAMS would,
// and counts those the server answered with headers (served) and those
// it reset (refused), once each has one or the other. It fails the test
// when 20 s pass first.
func Streams(t testing.TB, addr, path string, n int) (served, refused int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // the framer's writes, from two goroutines
	go func() {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			for _, f := range []hpack.HeaderField{
				{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: addr},
				{Name: ":path", Value: path}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
			} {
				_ = enc.WriteField(f)
			}
			id := uint32(2*i + 1)
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}) != nil {
				return
			}
			if fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}) != nil {
				return
			}
		}
	}()
	answered := map[uint32]bool{}
	for len(answered) < n {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d served and %d refused of %d streams: %v", served, refused, n, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				mu.Lock()
				_ = fr.WriteSettingsAck()
				mu.Unlock()
			}
		case *http2.HeadersFrame:
			if !answered[f.StreamID] {
				answered[f.StreamID] = true
				served++
			}
		case *http2.RSTStreamFrame:
			if !answered[f.StreamID] {
				answered[f.StreamID] = true
				refused++
			}
		case *http2.GoAwayFrame:
			t.Fatalf("the server went away (%v) after %d served and %d refused of %d streams", f.ErrCode, served, refused, n)
		}
	}
	return served, refused
}

// Unread sends n gRPC requests for path (a method taking an empty message)
// on one raw HTTP/2 connection to addr whose client grants no flow-control
// window, so the server can send the responses' headers but none of their
// data, and answers the server's pings, as a client that reads nothing
// but keeps its connection alive would. It returns how many responses
// began (their headers came) when the server closed the connection, and
// fails the test when 20 s pass first.
func Unread(t testing.TB, addr, path string, n int) (began int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var mu sync.Mutex // the framer's writes, from two goroutines
	write := func(f func() error) error { mu.Lock(); defer mu.Unlock(); return f() }
	if err := write(func() error { return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}) }); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range n {
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			for _, f := range []hpack.HeaderField{
				{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: addr},
				{Name: ":path", Value: path}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
			} {
				_ = enc.WriteField(f)
			}
			id := uint32(2*i + 1)
			if write(func() error {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
					return err
				}
				return fr.WriteData(id, true, []byte{0, 0, 0, 0, 0})
			}) != nil {
				return
			}
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept the connection of a client that read nothing for 20 s (%d responses began)", began)
		}
		if err != nil {
			return began
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = write(fr.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = write(func() error { return fr.WritePing(true, f.Data) })
			}
		case *http2.HeadersFrame:
			if f.StreamID%2 == 1 && !f.StreamEnded() {
				began++
			}
		case *http2.GoAwayFrame:
			return began
		}
	}
}
