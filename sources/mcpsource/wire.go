package mcpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/tools"
)

// The gateway reads what a server sends as it crosses the wire, before the
// SDK does. The SDK hands notifications to their handlers on a goroutine of
// its own while it delivers responses directly, so a progress notification
// written before a call's response could reach its handler after the call
// had returned, and be dropped. Seen on the wire, each report is queued for
// its call before the SDK has even read the response that follows it.
//
// stdio connections are wrapped as mcp.Connection values. Streamable HTTP
// connections cannot be: the SDK tells its own connection type about the
// session through an unexported method (the protocol version header, the
// standalone SSE stream), which a wrapper would hide. Their response bodies
// are observed instead, in the HTTP client's RoundTripper (httpSession).

// maxObserved bounds what is buffered to observe one message; the SDK's own
// limit on an SSE event (mcp.DefaultMaxEventSize) is the same.
const maxObserved = mcp.DefaultMaxEventSize

// observe handles a message from the server in wire order: progress
// notifications go to their calls, responses to the gateway's own requests
// (see tasks.go) to their callers, and tools/list results say which tools
// require task augmentation. r is the session's rpc (nil until it is up).
// It reports whether the SDK need not see the message: a response to the
// gateway, or a progress notification, which the SDK would decode again
// and hand to a handler the gateway does not set (a server's flood of them
// cost a fifth more CPU that way).
func (s *server) observe(msg jsonrpc.Message, r *rpc) (ours bool) {
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m.Method != "notifications/progress" {
			return false
		}
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(m.Params, &p) == nil {
			s.progress(&p)
		}
		return true
	case *jsonrpc.Response:
		if r != nil && r.deliver(m) {
			return true
		}
		if bytes.Contains(m.Result, []byte(`"taskSupport"`)) {
			s.noteTaskSupport(m.Result)
		}
	}
	return false
}

// observeData decodes one message's JSON when it may matter to observe:
// most messages are responses the gateway leaves to the SDK.
func (s *server) observeData(data []byte, r *rpc) {
	if !bytes.Contains(data, []byte(`notifications/progress`)) && !bytes.Contains(data, []byte(`"taskSupport"`)) &&
		!bytes.Contains(data, []byte(rpcIDPrefix)) {
		return
	}
	if msg, err := decodeMessage(data); err == nil {
		s.observe(msg, r)
	}
}

// asWritten keeps, for a call sent through the SDK, the structured content
// of its result as the server wrote it, seen on the wire: over streamable
// HTTP in the response to the call's POST, which the SDK makes with the
// call's context, where asWritten rides; over stdio in the response to
// the request the SDK wrote with that context. The SDK decodes structured
// content into an any: every number became a float64
// (12345678901234567891 came back as 12345678901234567000) and every
// object's keys were sorted, where a call the gateway sends itself
// (callDirect) kept it as written.
type asWritten struct {
	mu         sync.Mutex
	structured json.RawMessage // compacted; the last response's that had any
	forget     func()          // stdio: stop waiting for the response
}

type asWrittenKey struct{}

// observe notes the structured content of data, a message of the call's
// POST's response, when it is a response that has any.
func (a *asWritten) observe(data []byte) {
	if a == nil || !bytes.Contains(data, []byte(`"structuredContent"`)) {
		return
	}
	msg, err := decodeMessage(data)
	if resp, ok := msg.(*jsonrpc.Response); err == nil && ok {
		a.observeResponse(resp)
	}
}

// observeResponse notes the structured content of resp's result, if any.
func (a *asWritten) observeResponse(resp *jsonrpc.Response) {
	if resp.Error != nil || !bytes.Contains(resp.Result, []byte(`"structuredContent"`)) {
		return
	}
	var r struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	var b bytes.Buffer
	if json.Unmarshal(resp.Result, &r) != nil || len(r.StructuredContent) == 0 || json.Compact(&b, r.StructuredContent) != nil {
		return
	}
	a.mu.Lock()
	a.structured = b.Bytes()
	a.mu.Unlock()
}

// apply puts the structured content as written in out, in place of what
// the SDK decoded, when the result has some and it was seen.
func (a *asWritten) apply(out *tools.Result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.structured != nil && out.StructuredContent != nil {
		out.StructuredContent = a.structured
	}
}

// release stops waiting for the call's response: it came, or never will.
func (a *asWritten) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.forget != nil {
		a.forget()
	}
}

// wireTransport keeps the connection it makes, for the gateway's own
// requests, and wraps it in a wireConn when wrap is set (stdio; see above).
type wireTransport struct {
	mcp.Transport
	s    *server
	wrap bool
	http *httpSession // streamable HTTP: the session's HTTP client
}

func (t wireTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	var wired *atomic.Pointer[rpc]
	if t.wrap {
		wired = new(atomic.Pointer[rpc])
	}
	t.s.mu.Lock()
	t.s.conn, t.s.wired = c, wired
	t.s.mu.Unlock()
	if t.http != nil {
		t.http.setConn(c)
	}
	if !t.wrap {
		return c, nil
	}
	return wireConn{Connection: c, s: t.s, rpc: wired, calls: new(sync.Map)}, nil
}

// wireConn observes every message read from a connection.
type wireConn struct {
	mcp.Connection
	s *server
	// rpc is the gateway's requests on this connection, nil until its
	// session is up. It is the connection's own, not the server's current
	// one: a session stopped by Sync reads the responses to its calls in
	// flight after the server has let go of it (or moved on to a new
	// session), and they are still theirs.
	rpc *atomic.Pointer[rpc]
	// calls are the SDK's tools/call requests written with an asWritten
	// in their context, by ID, until their responses are read.
	calls *sync.Map
}

func (c wireConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if resp, ok := msg.(*jsonrpc.Response); ok && c.calls != nil {
			if a, ok := c.calls.LoadAndDelete(resp.ID); ok {
				a.(*asWritten).observeResponse(resp)
			}
		}
		if err != nil || !c.s.observe(msg, c.rpc.Load()) {
			return msg, err
		}
	}
}

// Write sends msg, noting the ID of a call's request once it is written
// (see sentCall), and where its response is to be kept as written (see
// asWritten).
func (c wireConn) Write(ctx context.Context, msg jsonrpc.Message) (err error) {
	if sc := sentCallOf(ctx); sc != nil {
		if isNotice(msg) {
			defer sc.noticed() // once written, or it failed
		} else {
			// A request never written (its call ended while it waited to
			// be) has no notice to wait for: the server knows nothing of it.
			defer func() {
				if err == nil {
					sc.note(msg)
				}
			}()
		}
	}
	if a, ok := ctx.Value(asWrittenKey{}).(*asWritten); ok && c.calls != nil {
		if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" && req.ID.IsValid() {
			c.calls.Store(req.ID, a)
			a.mu.Lock()
			a.forget = func() { c.calls.Delete(req.ID) }
			a.mu.Unlock()
		}
	}
	return c.Connection.Write(ctx, msg)
}

// wireBody observes the message of one streamable HTTP JSON response body
// as the SDK reads it; of an SSE stream, it tells the session when the
// stream breaks, and its events are observed as they end by the stream's
// bound (sseBound), which parses them anyway.
type wireBody struct {
	io.ReadCloser
	s    *server
	hs   *httpSession    // nil in tests of the body alone
	ctx  context.Context // the request's
	sse  bool
	buf  []byte     // JSON: the body so far
	off  bool       // it was too large: observe no more
	call *asWritten // the POST of a call through the SDK: its result as written

	broken bool // the session was told that the stream broke
}

// observeBody wraps resp's body, a response of hs's session, when it
// carries messages; an SSE stream's body is hs's bound (sseBound), whose
// events it observes.
func (s *server) observeBody(resp *http.Response, hs *httpSession) {
	ct := resp.Header.Get("Content-Type")
	sse := strings.HasPrefix(ct, "text/event-stream")
	if sse || strings.HasPrefix(ct, "application/json") {
		ctx := context.Background()
		if resp.Request != nil {
			ctx = resp.Request.Context()
		}
		call, _ := ctx.Value(asWrittenKey{}).(*asWritten)
		if sb, ok := resp.Body.(*sseBound); ok {
			sb.observe = func(data []byte) {
				s.observeData(data, hs.sessionRPC())
				call.observe(data)
			}
		}
		resp.Body = &wireBody{ReadCloser: resp.Body, s: s, hs: hs, ctx: ctx, sse: sse, call: call}
	}
}

func (b *wireBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.sse {
		if err != nil && err != io.EOF && !b.broken && b.hs != nil && b.ctx.Err() == nil {
			// The stream broke, and not because the SDK or the session
			// ended it: its connection failed.
			b.broken = true
			b.hs.broke()
		}
		return n, err
	}
	if !b.off {
		b.buf = append(b.buf, p[:n]...)
		if err == io.EOF {
			b.s.observeData(b.buf, b.hs.sessionRPC())
			b.call.observe(b.buf)
			b.buf = nil
		}
		if len(b.buf) > maxObserved {
			b.off, b.buf = true, nil
		}
	}
	return n, err
}
