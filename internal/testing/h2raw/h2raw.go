// Package h2raw sends what a hostile HTTP/2 client sends, past what
// well-behaved clients (grpc-go's, net/http's) would refuse to send.
package h2raw

import (
	"bytes"
	"encoding/binary"
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

// conn is a raw HTTP/2 client connection whose writes may come from two
// goroutines (the requests, and the answers to the server's SETTINGS and
// PINGs).
type conn struct {
	net.Conn
	fr *http2.Framer
	mu sync.Mutex // the framer's writes
}

// dial opens a connection to addr that gives up 20 s after it began, sends
// the client preface and settings.
func dial(t testing.TB, addr string, settings ...http2.Setting) *conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	c := &conn{Conn: nc, fr: http2.NewFramer(nc, nc)}
	if err := c.write(func() error { return c.fr.WriteSettings(settings...) }); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *conn) write(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f()
}

// request sends a gRPC request for path on stream id with the header
// block given (requestHeaders), in frames of the default maximum size, and
// an empty message.
func (c *conn) request(id uint32, block []byte) error {
	return c.write(func() error {
		const frag = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
		first := block[:min(frag, len(block))]
		rest := block[len(first):]
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(rest) == 0}); err != nil {
			return err
		}
		for len(rest) > 0 {
			next := rest[:min(frag, len(rest))]
			rest = rest[len(next):]
			if err := c.fr.WriteContinuation(id, len(rest) == 0, next); err != nil {
				return err
			}
		}
		return c.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0})
	})
}

// answer answers the server's SETTINGS and PINGs as a live client does.
func (c *conn) answer(f http2.Frame) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = c.write(c.fr.WriteSettingsAck)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = c.write(func() error { return c.fr.WritePing(true, f.Data) })
		}
	}
}

// timedOut reports whether err is the connection's 20 s running out.
func timedOut(err error) bool {
	ne := net.Error(nil)
	return errors.As(err, &ne) && ne.Timeout()
}

// requestHeaders is the header block of a gRPC request for path to addr,
// with fields metadata fields of size bytes each.
func requestHeaders(addr, path string, fields, size int) []byte {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: addr},
		{Name: ":path", Value: path}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f) // writes to a bytes.Buffer do not fail
	}
	for i := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: strings.Repeat("x", size)})
	}
	return block.Bytes()
}

// Headers sends one gRPC request for path (a method taking an empty
// message) with fields metadata fields of size bytes each over a raw
// HTTP/2 connection to addr, as a client that ignores the server's
// SETTINGS_MAX_HEADER_LIST_SIZE would, and says how the server answered:
// "RST_STREAM <code>", "GOAWAY <code>", "closed", "served" (response
// headers came), or "no answer" (none in 20 s).
func Headers(t testing.TB, addr, path string, fields, size int) string {
	t.Helper()
	c := dial(t, addr)
	// Written beside the reads: the server may answer, or close the
	// connection, before the last fragment.
	go func() { _ = c.request(1, requestHeaders(addr, path, fields, size)) }()
	for {
		f, err := c.fr.ReadFrame()
		if timedOut(err) {
			return "no answer"
		}
		if err != nil {
			return "closed"
		}
		c.answer(f)
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
	c := dial(t, addr)
	go func() {
		for i := range n {
			if c.request(uint32(2*i+1), requestHeaders(addr, path, 0, 0)) != nil {
				return
			}
		}
	}()
	answered := map[uint32]bool{}
	for len(answered) < n {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d served and %d refused of %d streams: %v", served, refused, n, err)
		}
		c.answer(f)
		switch f := f.(type) {
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
	c := dial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	go func() {
		for i := range n {
			if c.request(uint32(2*i+1), requestHeaders(addr, path, 0, 0)) != nil {
				return
			}
		}
	}()
	for {
		f, err := c.fr.ReadFrame()
		if timedOut(err) {
			t.Fatalf("the server kept the connection of a client that read nothing for 20 s (%d responses began)", began)
		}
		if err != nil {
			return began
		}
		c.answer(f)
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if f.StreamID%2 == 1 && !f.StreamEnded() {
				began++
			}
		case *http2.GoAwayFrame:
			return began
		}
	}
}

// Unsent opens a stream of method on a raw HTTP/2 connection to
// addr, announces a 4 MiB message and sends none of it, and returns the
// grpc-status and grpc-message of the server's answer: "" if none came
// within a bound far past any refusal's.
func Unsent(t *testing.T, addr, method, authorization string) (code, msg string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}}
	if authorization != "" {
		fields = append(fields, [2]string{"authorization", authorization})
	}
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], 4<<20-100)
	fr.WriteData(1, false, prefix)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "", err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hf {
				switch h.Name {
				case "grpc-status":
					code = h.Value
				case "grpc-message":
					msg = h.Value
				}
			}
			if code != "" {
				return code, msg
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "", "reset: " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "", "goaway"
		}
	}
}

// Held opens n streams of method on one raw HTTP/2 connection to addr,
// each announcing a 4 MiB message and sending none of it, as a client that
// sends its requests slowly does, and reads until answers of them have
// been answered, failing the test when 20 s pass first. It returns each
// stream's answer in stream order: its grpc-status, "reset: CODE" for a
// reset, "" for none yet. The connection stays open, holding the streams
// not answered, until closeConn is called or the test ends.
func Held(t testing.TB, addr, method string, n, answers int) (got []string, closeConn func()) {
	t.Helper()
	c := dial(t, addr)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], 4<<20-100)
	go func() {
		for i := range n {
			id := uint32(2*i + 1)
			if c.write(func() error {
				if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
					return err
				}
				return c.fr.WriteData(id, false, prefix)
			}) != nil {
				return
			}
		}
	}()
	got = make([]string, n)
	dec := hpack.NewDecoder(4096, nil)
	for answered := 0; answered < answers; {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("%d of %d streams answered, %q: %v", answered, n, got, err)
		}
		c.answer(f)
		var id uint32
		var answer string
		switch f := f.(type) {
		case *http2.HeadersFrame:
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hf {
				if h.Name == "grpc-status" {
					id, answer = f.StreamID, h.Value
				}
			}
		case *http2.RSTStreamFrame:
			id, answer = f.StreamID, "reset: "+f.ErrCode.String()
		case *http2.GoAwayFrame:
			t.Fatalf("the server went away (%v) with %d of %d streams answered", f.ErrCode, answered, n)
		}
		if i := int(id-1) / 2; answer != "" && id%2 == 1 && i < n && got[i] == "" {
			got[i] = answer
			answered++
		}
	}
	_ = c.SetDeadline(time.Time{}) // held until closed
	return got, func() { c.Close() }
}
