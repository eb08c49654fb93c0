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
// when it is an SSE stream (sseBound, which stands in for the answers an
// event past it held). A JSON body past it that answers a request (a POST
// of one message with an ID) is not read on: the SDK gets, in its place,
// an error response to that request saying so (standIn), and the session
// goes on, as for a stdio server's line past the bound (oversized.go). Any
// other JSON body past it fails and gives the session up: the SDK fails
// the session on a body it cannot read anyway, and the cause is then this,
// not a closed connection.
//
// A JSON body of unknown length is read whole before the SDK reads it
// (which it does, whole, before it decodes it); one whose length is known
// is passed through or stood in for at once.
func (h *httpSession) bound(resp *http.Response) {
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		resp.Body = &sseBound{ReadCloser: resp.Body, h: h, max: maxResponseBody}
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
// bytes of its lines as the SDK counts them, and hands each event's data
// within it to observe (wire.go) as the event ends, before the SDK reads
// its end. An event past the bound is cut there for the SDK and named so
// that the SDK skips it (sseDropped); the rest of it is read unkept,
// through a scan (oversized) fed what was kept of it first, so that once
// the event ends each response it held gets a stand-in (tooLarge), an
// event of its own: the call it answers fails saying why, and the session
// goes on, as for a stdio server's line past the bound. The SDK's own
// bound (MaxEventSize) is set above this one, so that the cut comes first.
type sseBound struct {
	io.ReadCloser
	h       *httpSession
	max     int64        // maxResponseBody
	observe func([]byte) // an event's data, as it ends; nil: none
	event   int64        // bytes of the event so far
	line    sseLine      // the line being read
	kept    []byte       // the event's data lines, joined, until the cut
	scan    oversized    // the event's data past the cut, after what was kept
	data    bool         // the event has had a data line
	named   bool         // the event is named other than "message": no message to the SDK
	cut     bool         // the event went past the bound: what is left of it is dropped
	id      []byte       // the event's id field, once cut
	out     []byte       // what to hand the SDK before reading on: the cut's end, stand-ins
	pending []byte       // read and not yet taken, after a cut
	err     error        // the body's, once what was read before it is handed on
}

// sseDropped names the cut part of an event past the bound; the SDK skips
// events named other than "message".
const sseDropped = "toolwire-dropped-past-the-bound"

// sseSlack is how far past maxResponseBody the SDK's bound on an event
// is: room for the cut's end.
const sseSlack = 64 << 10

// sseLine is what is known of the line being read.
type sseLine struct {
	begun bool     // some of it was read
	n     int      // its bytes so far, not counting '\r'
	field [8]byte  // its first bytes, up to its colon: its field
	fn    int      // the bytes of its field so far
	kind  lineKind // once its colon is read
	space bool     // the byte after the colon is next: a space there is skipped
	name  []byte   // an event line's value so far (its first bytes)
}

var newline = []byte{'\n'}

type lineKind uint8

const (
	fieldName lineKind = iota // the colon is not read yet
	dataLine
	idLine
	eventLine
	otherLine
)

func (b *sseBound) Read(p []byte) (int, error) {
	for {
		if len(b.out) > 0 {
			n := copy(p, b.out)
			b.out = b.out[n:]
			return n, nil
		}
		if len(b.pending) > 0 {
			q := b.pending[:min(len(b.pending), len(p))]
			pass, used := b.take(q)
			copy(p, q[:pass])
			b.pending = b.pending[used:]
			if pass > 0 {
				return pass, nil
			}
			continue
		}
		if b.err != nil {
			if b.cut { // the stream ended within the event
				b.drop(b.err == io.EOF)
				continue
			}
			return 0, b.err
		}
		n, err := b.ReadCloser.Read(p)
		b.err = err
		pass, used := b.take(p[:n])
		b.pending = append(b.pending[:0], p[used:n]...)
		if pass > 0 {
			return pass, nil
		}
	}
}

// take reads q on from its start, to the end of q or the first point at
// which something must be handed the SDK before the rest (in out): the
// event's cut, or stand-ins for the event dropped. q[:pass] go to the SDK
// as they are; q[:used] are taken.
func (b *sseBound) take(q []byte) (pass, used int) {
	for used < len(q) {
		seg := q[used:]
		if j := bytes.IndexByte(seg, '\n'); j >= 0 {
			seg = seg[:j+1]
		}
		if !b.cut && b.event+int64(len(seg)) > b.max {
			seg = seg[:b.max-b.event]
			b.lineBytes(seg)
			b.event += int64(len(seg))
			used += len(seg)
			b.cutHere()
			return used, used
		}
		b.event += int64(len(seg))
		used += len(seg)
		if !b.cut {
			pass = used
		}
		if b.lineBytes(seg) { // a blank line: the event ended
			if b.cut {
				b.drop(true)
				return pass, used
			}
			if len(b.kept) > 0 && !b.named && b.observe != nil {
				b.observe(b.kept)
			}
			b.reset()
		}
	}
	return pass, used
}

// lineBytes reads seg, the bytes of the line being read up to its end at
// most, feeding a data line's value to the scan; it reports whether seg
// ended a blank line, which ends the event.
func (b *sseBound) lineBytes(seg []byte) (blank bool) {
	l := &b.line
	l.begun = l.begun || len(seg) > 0
	end := len(seg) > 0 && seg[len(seg)-1] == '\n'
	if end {
		seg = seg[:len(seg)-1]
	}
	for len(seg) > 0 && l.kind == fieldName {
		c := seg[0]
		seg = seg[1:]
		if c != '\r' {
			l.n++
		}
		if c == ':' {
			l.kind, l.space = otherLine, true
			switch string(l.field[:min(l.fn, len(l.field))]) {
			case "data":
				l.kind = dataLine
				if b.data {
					b.addData(newline) // data lines join with one
				}
				b.data = true
			case "id":
				l.kind = idLine
				b.id = b.id[:0]
			case "event":
				l.kind = eventLine
			}
			continue
		}
		if l.fn < len(l.field) {
			l.field[l.fn] = c
		}
		l.fn++
	}
	if l.space && len(seg) > 0 {
		l.space = false
		if seg[0] == ' ' {
			seg = seg[1:]
		}
	}
	if len(seg) > 0 {
		l.n += len(seg) - bytes.Count(seg, []byte{'\r'})
		switch l.kind {
		case dataLine:
			b.addData(seg)
		case idLine:
			if len(b.id)+len(seg) <= maxIDBytes {
				b.id = append(b.id, seg...)
			}
		case eventLine:
			if len(l.name)+len(seg) <= len("message")+1 { // one more: longer is no "message"
				l.name = append(l.name, seg...)
			} else {
				l.name = append(l.name[:0], "-"...)
			}
		}
	}
	if !end {
		return false
	}
	if l.kind == eventLine {
		// The SDK reads the event's last name, trimmed; "message" is none.
		v := bytes.TrimSpace(l.name)
		b.named = len(v) > 0 && string(v) != "message"
	}
	blank = l.n == 0
	*l = sseLine{name: l.name[:0]}
	return blank
}

// addData adds to the event's data: kept within the bound, scanned past it.
func (b *sseBound) addData(p []byte) {
	if b.cut {
		b.scan.Write(p)
	} else {
		b.kept = append(b.kept, p...)
	}
}

// cutHere ends the event for the SDK where it is, past the bound, naming
// it so that the SDK skips it; the rest of it is dropped, scanned after
// what was kept of it.
func (b *sseBound) cutHere() {
	b.cut = true
	b.scan.Write(b.kept)
	if l := &b.line; l.begun { // the line is cut short: end it
		if l.kind == fieldName {
			// Before its colon, where the SDK would fail the stream on a
			// line without one: made a field the SDK ignores, or sets
			// again below.
			b.out = append(b.out, ':')
		}
		b.out = append(b.out, '\n')
	}
	b.out = append(b.out, "event: "+sseDropped+"\n\n"...)
}

// drop logs the event dropped and hands the SDK a stand-in for each
// response it held (and its id, for resuming after it); ended, when the
// event was read to its end, and its size is known.
func (b *sseBound) drop(ended bool) {
	var stand []jsonrpc.Message
	dropped := 1
	if !b.named {
		stand, dropped = b.scan.answers(ended)
	}
	b.h.s.log.Warn("MCP server sent a message past the bound; dropped", "bytes", b.event, "bound_bytes", b.max, "answers_failed", len(stand), "messages_dropped", dropped)
	if len(b.id) > 0 {
		b.out = append(append(append(b.out, "id: "...), b.id...), '\n')
		if len(stand) == 0 {
			b.out = append(b.out, '\n')
		}
	}
	for _, m := range stand {
		if data, err := jsonrpc.EncodeMessage(m); err == nil {
			b.out = append(append(append(b.out, "data: "...), data...), "\n\n"...)
		}
	}
	b.reset()
}

// reset readies b for the next event.
func (b *sseBound) reset() {
	b.event, b.data, b.named, b.cut, b.id = 0, false, false, false, b.id[:0]
	if b.kept = b.kept[:0]; cap(b.kept) > 1<<20 {
		b.kept = nil // an event's data, not kept for the stream's life
	}
	b.scan.reset()
}

// A server's tools/list is bounded in tools, in the bytes of what is kept
// of them, and in pages; a cursor seen before ends it too
// (sources/internal/listing, as every source's listing is). A listing
// that never ends (a cursor on every page) was read page after page until
// requestTimeout, then again after reconnecting: 428 MiB held at its peak.
