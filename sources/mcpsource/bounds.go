package mcpsource

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What a server sends is bounded before it is held: the gateway, not the
// server, decides how much of it is kept in memory.

// maxResponseBody bounds a response body that is not an SSE stream. The
// SDK reads such a body whole before it decodes it (a JSON message, the
// body of an error status), with no bound of its own; an SSE stream is
// read event by event, each at most mcp.DefaultMaxEventSize, and one
// message in a JSON body is no larger.
const maxResponseBody = mcp.DefaultMaxEventSize

// errResponseTooLarge is why a session that got a body past
// maxResponseBody was given up.
var errResponseTooLarge = fmt.Errorf("the server sent a response larger than %d MiB", maxResponseBody>>20)

// bound makes resp's body at most maxResponseBody, or each of its events
// when it is an SSE stream (sseBound). A JSON body past it that answers a
// request (a POST of one message with an ID) is not read on: the SDK gets,
// in its place, an error response to that request saying so (standIn), and
// the session goes on, as for a stdio server's line past the bound
// (oversized.go). Any other body past it fails and gives the session up:
// the SDK fails the session on a body it cannot read anyway, and the cause
// is then this, not a closed connection.
//
// A JSON body of unknown length is read whole before the SDK reads it
// (which it does, whole, before it decodes it); one whose length is known
// is passed through or stood in for at once.
func (h *httpSession) bound(resp *http.Response) {
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		resp.Body = &sseBound{ReadCloser: resp.Body, h: h}
		return
	}
	b := &boundedBody{ReadCloser: resp.Body, left: maxResponseBody, h: h}
	switch {
	case resp.StatusCode/100 != 2 || !strings.HasPrefix(ct, "application/json"):
		// An error status's body: the SDK reads it for its message.
	case resp.ContentLength > maxResponseBody:
		if stand := standIn(resp.Request, resp.ContentLength, true); stand != nil {
			resp.Body.Close()
			resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(stand)), int64(len(stand))
			return
		}
	case resp.ContentLength < 0:
		b.whole, b.req = true, resp.Request
	}
	resp.Body = b
}

// standIn returns an error response to req's message, saying that its
// answer of size bytes (at least, unless exact) was past the bound; nil
// when req is no POST of a request with an ID.
func standIn(req *http.Request, size int64, exact bool) []byte {
	if req == nil || req.Method != http.MethodPost || req.GetBody == nil {
		return nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, maxResponseBody))
	if err != nil || len(data) == 0 || data[0] == '[' {
		return nil
	}
	msg, err := decodeMessage(data)
	r, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || !r.IsCall() {
		return nil
	}
	line, err := jsonrpc.EncodeMessage(tooLarge(r.ID, size, exact))
	if err != nil {
		return nil
	}
	return line
}

// boundedBody is a body that fails past its bound, or, read whole first,
// stands in for itself past it.
type boundedBody struct {
	io.ReadCloser
	left  int64
	h     *httpSession
	whole bool          // read it whole at the first Read
	req   *http.Request // what it answers, for a stand-in
	data  *bytes.Reader // what was read whole, or its stand-in
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.whole {
		b.whole = false
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(io.LimitReader(b.ReadCloser, maxResponseBody+1)); err != nil {
			return 0, err
		}
		data := buf.Bytes()
		if len(data) > maxResponseBody {
			if data = standIn(b.req, maxResponseBody, false); data == nil {
				b.h.lose(errResponseTooLarge)
				return 0, errResponseTooLarge
			}
			b.ReadCloser.Close() // not read on
		}
		b.data = bytes.NewReader(data)
	}
	if b.data != nil {
		return b.data.Read(p)
	}
	if b.left <= 0 {
		// At the bound: the body may end here.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n == 0 {
			return 0, err
		}
		b.h.lose(errResponseTooLarge)
		return 0, errResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// sseBound bounds each event of an SSE stream at maxResponseBody, in the
// bytes of its lines as the SDK counts them: an event past it gives the
// session up, saying so, as a body past the bound that answers no one
// request does. (An event cannot be stood in for as a JSON body is: what
// it answered is known only from the event's data, of which the SDK has by
// then been handed most.) The SDK's own bound (MaxEventSize) is set above
// this one, so that the session's cause is this.
type sseBound struct {
	io.ReadCloser
	h     *httpSession
	event int64 // bytes of the event so far
}

// sseSlack is how far past maxResponseBody the SDK's bound on an event is.
const sseSlack = 64 << 10

func (b *sseBound) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			b.event += int64(len(rest))
			break
		}
		line := rest[:j+1]
		rest = rest[j+1:]
		if b.event += int64(len(line)); b.event > maxResponseBody {
			break
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			b.event = 0 // a blank line ends the event
		}
	}
	if b.event > maxResponseBody {
		b.h.lose(errResponseTooLarge)
		return 0, errResponseTooLarge
	}
	return n, err
}

// A server's tools/list is bounded in tools, in the bytes of what is kept
// of them, and in pages; a cursor seen before ends it too
// (sources/internal/listing, as every source's listing is). A listing
// that never ends (a cursor on every page) was read page after page until
// requestTimeout, then again after reconnecting: 428 MiB held at its peak.
