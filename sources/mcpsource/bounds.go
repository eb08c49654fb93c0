package mcpsource

import (
	"fmt"
	"io"
	"net/http"
	"strings"

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

// bound makes resp's body, unless it is an SSE stream, fail past
// maxResponseBody and give the session up: the SDK fails the session on
// a body it cannot read anyway, and the cause is then this, not a closed
// connection.
func (h *httpSession) bound(resp *http.Response) {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: maxResponseBody, h: h}
}

// boundedBody is a body that fails past its bound.
type boundedBody struct {
	io.ReadCloser
	left int64
	h    *httpSession
}

func (b *boundedBody) Read(p []byte) (int, error) {
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

// A server's tools/list is bounded in tools, in the bytes of what is kept
// of them, and in pages; a cursor seen before ends it too
// (sources/internal/listing, as every source's listing is). A listing
// that never ends (a cursor on every page) was read page after page until
// requestTimeout, then again after reconnecting: 428 MiB held at its peak.
