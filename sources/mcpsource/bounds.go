package mcpsource

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/tools"
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
// of them, and in pages; a cursor seen before ends it too. A listing that
// never ends (a cursor on every page) was read page after page until
// requestTimeout, then again after reconnecting: 428 MiB held at its peak.
const (
	maxListedTools = 10_000
	maxListedBytes = 64 << 20 // names, titles, descriptions and schemas; max_list_bytes's default
	maxListPages   = 1_000
)

// listBounds are the bounds of one listing; the Gateway's are the
// constants above, unless a test lowers them.
type listBounds struct{ tools, bytes, pages int }

var defaultListBounds = listBounds{tools: maxListedTools, bytes: maxListedBytes, pages: maxListPages}

// listing counts one tools/list against its bounds; cut is why it stops
// short, once it must.
type listing struct {
	max                 listBounds
	tools, bytes, pages int
	cursors             map[[sha256.Size]byte]bool
	cut                 error
}

// tool counts a listed tool, and reports whether it may be read.
func (l *listing) tool() bool {
	if l.tools == l.max.tools {
		l.cut = fmt.Errorf("the server lists more than %d tools", l.max.tools)
		return false
	}
	l.tools++
	return true
}

// keep counts what is kept of d, and reports whether it may be.
func (l *listing) keep(d tools.Tool) bool {
	l.bytes += len(d.Name) + len(d.Title) + len(d.Description) + len(d.InputSchema) + len(d.OutputSchema)
	if l.bytes > l.max.bytes {
		l.cut = fmt.Errorf("the server's tools take more than %d MiB", l.max.bytes>>20)
		return false
	}
	return true
}

// next counts a page that ended with cursor, and reports whether the
// page it names is to be read.
func (l *listing) next(cursor string) bool {
	l.pages++
	switch {
	case cursor == "":
		return false
	case l.tools == l.max.tools: // a page more could only be cut
		l.cut = fmt.Errorf("the server lists more than %d tools", l.max.tools)
		return false
	case l.pages == l.max.pages:
		l.cut = fmt.Errorf("the server's listing goes on past %d pages", l.max.pages)
		return false
	}
	if l.cursors == nil {
		l.cursors = map[[sha256.Size]byte]bool{}
	}
	h := sha256.Sum256([]byte(cursor))
	if l.cursors[h] {
		l.cut = fmt.Errorf("the server's listing repeats a page (cursor %.40q after %d pages)", cursor, l.pages)
		return false
	}
	l.cursors[h] = true
	return true
}
