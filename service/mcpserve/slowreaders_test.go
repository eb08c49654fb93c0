package mcpserve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// slowBed is /mcp served as production serves it (the HTTP port, HTTP/1.1
// and h2c), on an engine logging to a buffer, with tools whose output no
// socket holds: blob (a result of the given MiB; results and messages
// may be 64 MiB) and drip (64 KiB output
// chunks until cancelled, then it says so on dripped).
type slowBed struct {
	eng     *engine.Engine
	mcp     *Server
	url     string
	addr    string
	log     *logbuf.Buffer
	dripped chan struct{}
}

func newSlowBed(t *testing.T, cfg engine.Config, opts *Options) *slowBed {
	t.Helper()
	b := &slowBed{log: &logbuf.Buffer{}, dripped: make(chan struct{}, 10)}
	type blobArgs struct {
		MiB int `json:"mib"`
	}
	blob := tools.MustTyped("blob", "Returns mib MiB of text.", func(_ context.Context, _ *tools.Call, in blobArgs) (*tools.Result, any, error) {
		return tools.Text(strings.Repeat("x", in.MiB<<20)), nil, nil
	})
	blob.Annotations.ReadOnly = true
	drip := tools.MustTyped("drip", "Streams output until cancelled.", func(ctx context.Context, c *tools.Call, _ struct{}) (*tools.Result, any, error) {
		chunk := strings.Repeat("y", 64<<10)
		for ctx.Err() == nil {
			c.Output(chunk)
			time.Sleep(time.Millisecond)
		}
		b.dripped <- struct{}{}
		return nil, nil, ctx.Err()
	})
	reg, err := tools.NewRegistry(append(diag.Tools(), blob, drip)...)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(b.log, nil))
	cfg.DrainTimeout = time.Second
	cfg.MaxResultBytes = 64 << 20
	cfg.MaxMessageBytes = 64 << 20
	b.eng = engine.New(cfg, engine.Deps{Logger: log})
	if opts == nil {
		opts = &Options{}
	}
	opts.Logger = log

	if b.mcp, err = New(b.eng, reg, *opts); err != nil {
		t.Fatal(err)
	}
	port := httpserve.New(httpserve.Config{}, nil, log)
	port.Handle("/mcp", testAuth(b.mcp), Refuse)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- port.Serve(ctx, smallSends{lis}) }()
	t.Cleanup(func() {
		cancel()
		b.mcp.Shutdown()
		<-served
		b.eng.Close()
	})
	b.addr = lis.Addr().String()
	b.url = "http://" + b.addr + "/mcp"
	return b
}

// smallSends gives the server's connections small send buffers, so that
// a client that reads nothing stops the server's writes after a few
// hundred KiB rather than the megabytes a loopback socket takes.
type smallSends struct{ net.Listener }

func (l smallSends) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(64 << 10)
	}
	return c, err
}

// callBody is a 2026-07-28 tools/call of name with args, asking progress.
func callBody(name, args string) string {
	return `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args +
		`,"_meta":{"progressToken":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
}

// stall sends a 2026-07-28 tools/call of name and never reads the answer:
// over HTTP/1.1 from a socket with a small receive buffer, over h2c
// without reading the body.
func (b *slowBed) stall(t *testing.T, h2c bool, name, args string) {
	t.Helper()
	body := callBody(name, args)
	headers := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Protocol-Version": RevisionStateless, "Mcp-Method": "tools/call", "Mcp-Name": name, "Authorization": "Bearer alice-token"}
	if h2c {
		req, _ := http.NewRequest(http.MethodPost, b.url, strings.NewReader(body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		// HTTP/2's windows as small as they go: the client's transport
		// takes what they allow, read by its user or not.
		tr := &http.Transport{Protocols: new(http.Protocols), HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}}
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		go func() {
			// Its end may come before the response's header does: the
			// stream reset by the server.
			if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
				t.Cleanup(func() { resp.Body.Close() }) // read nothing until the end
			}
		}()
		return
	}
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	var sb strings.Builder
	sb.WriteString("POST /mcp HTTP/1.1\r\nHost: " + b.addr + "\r\n")
	for k, v := range headers {
		fmt.Fprintf(&sb, "%s: %s\r\n", k, v)
	}
	fmt.Fprintf(&sb, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, sb.String()); err != nil {
		t.Fatal(err)
	}
}

// echo calls echo as a normal client, over a connection of its own.
func (b *slowBed) echo(t *testing.T) {
	t.Helper()
	cs := connect(t, b.url, "alice-token", RevisionStateless, nil)
	if res := call(t, cs, "echo", `{"text":"beside"}`, nil); text(res) != "beside" {
		t.Errorf("a normal call beside the stalled one: %+v", res)
	}
	_ = cs.Close()
}

// ended waits until the engine ends the stalled stream (its log says why)
// and no batch nor request is left.
func (b *slowBed) ended(t *testing.T, why string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.log.String(), why) || b.eng.Stats().Batches != 0 || b.inflight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches, %d requests still in flight; log:\n%s", b.eng.Stats().Batches, b.inflight(), b.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := b.log.String(); strings.Contains(l, "cannot be ended") {
		t.Errorf("the engine could not end the stream:\n%s", l)
	}
}

func (b *slowBed) inflight() int {
	n := 0
	b.mcp.inflight.Range(func(any, any) bool { n++; return true })
	return n
}

// TestStalledResultIsEnded: a client that reads nothing of a tools/call's
// result holds the server's write; after send_timeout the engine's
// watchdog ends the response (the result's Send waits for its write, so
// the batch is still running), over HTTP/1.1 and h2c, while other callers
// are served.
func TestStalledResultIsEnded(t *testing.T) {
	t.Parallel()
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "h2c"}[h2c], func(t *testing.T) {
			t.Parallel()
			b := newSlowBed(t, engine.Config{SendTimeout: time.Second}, nil)
			b.stall(t, h2c, "blob", `{"mib":1}`)
			waitFor(t, "the blob's result to be written", func() bool { return b.eng.Stats().BufferedBytes > 1<<20 })
			b.echo(t)
			b.ended(t, "client read nothing for the send timeout; ending its stream")
			b.echo(t)
		})
	}
}

// TestStalledProgressCancelsCall: a client that reads nothing of a call's
// progress has its response ended and its call cancelled: the tool sees
// its context end.
func TestStalledProgressCancelsCall(t *testing.T) {
	t.Parallel()
	b := newSlowBed(t, engine.Config{SendTimeout: 300 * time.Millisecond}, nil)
	b.stall(t, false, "drip", `{}`)
	select {
	case <-b.dripped:
	case <-time.After(30 * time.Second):
		t.Fatalf("the stalled call was not cancelled; log:\n%s", b.log)
	}
	b.ended(t, "client read nothing for the send timeout; ending its stream")
}

// TestStalledResultsOverBudget: results waiting for clients that read
// nothing count against max_buffered_bytes; past it the streams holding
// the most are ended long before send_timeout.
func TestStalledResultsOverBudget(t *testing.T) {
	t.Parallel()
	b := newSlowBed(t, engine.Config{SendTimeout: time.Hour, MaxBufferedBytes: 1 << 20}, nil)
	for range 2 {
		b.stall(t, false, "blob", `{"mib":1}`)
	}
	b.ended(t, "passed max_buffered_bytes")
	if st := b.eng.Stats(); st.EndedOverBudget != 2 || st.BufferedBytes != 0 {
		t.Errorf("%+v: want the two stalled streams ended for the budget, nothing held", st)
	}
	b.echo(t)
}

// TestStalledListIsEnded: a write that is not a call's (here a tools/list
// page no socket holds) is ended after send_timeout too.
func TestStalledListIsEnded(t *testing.T) {
	t.Parallel()
	var many []tools.Tool
	desc := strings.Repeat("d", 4<<10)
	for i := range 250 { // 1 MiB of descriptions
		many = append(many, tools.MustTyped("t"+strconv.Itoa(i), desc, func(context.Context, *tools.Call, struct{}) (*tools.Result, any, error) {
			return nil, nil, nil
		}))
	}
	b := newSlowBed(t, engine.Config{SendTimeout: 300 * time.Millisecond}, nil)
	if err := b.mcp.reg.Add(many...); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: "+b.addr+"\r\nAuthorization: Bearer alice-token\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Mcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	b.ended(t, "MCP response: the client read nothing for the send timeout")
	if b.mcp.writes.Stopped() != 1 {
		t.Errorf("the surface's watch ended %d responses, want 1", b.mcp.writes.Stopped())
	}
	b.echo(t)
}

// TestStalledLastBytesAreEnded: a response small enough to sit in the
// server's buffers when its handler returns (here a refusal) still waits
// for the client when the connection's HTTP/2 window is spent (here by a
// tools/list nobody reads); it is flushed while watched, so it too is
// ended after send_timeout instead of holding its goroutine for good.
func TestStalledLastBytesAreEnded(t *testing.T) {
	t.Parallel()
	b := newSlowBed(t, engine.Config{SendTimeout: 300 * time.Millisecond}, nil)
	var many []tools.Tool
	for i := range 100 { // a list of 200 KiB
		many = append(many, tools.MustTyped("t"+strconv.Itoa(i), strings.Repeat("d", 2<<10), func(context.Context, *tools.Call, struct{}) (*tools.Result, any, error) {
			return nil, nil, nil
		}))
	}
	if err := b.mcp.reg.Add(many...); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A client that takes the frames off the connection but never gives
	// the server more window than HTTP/2's first 64 KiB for the whole
	// connection: it reads none of the streams' data.
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	send := func(stream uint32, method, accept, body string) {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", b.addr}, {":path", "/mcp"},
			{"content-type", "application/json"}, {"accept", accept}, {"authorization", "Bearer alice-token"},
			{"mcp-protocol-version", RevisionStateless}, {"mcp-method", method}, {"content-length", strconv.Itoa(len(body))}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(stream, true, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	stopped := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for b.mcp.writes.Stopped() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d responses ended, want %d; log:\n%s", b.mcp.writes.Stopped(), n, b.log)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Stream 1 spends the window (it is ended only once its write has
	// waited, so after the window is spent).
	list := `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	send(1, "tools/list", "application/json, text/event-stream", list)
	stopped(1)
	// Stream 3 is refused (a wrong Accept): a few hundred bytes.
	send(3, "tools/list", "text/html", list)
	stopped(2)
	waitFor(t, "no request in flight", func() bool { return b.inflight() == 0 })
}
