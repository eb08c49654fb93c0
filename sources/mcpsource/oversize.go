package mcpsource

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A stdio server's line past maxResponseBody is read to its end without
// being kept, and what the gateway must know of it is picked out on the
// way: the ID of each response it holds, so that the call it answers
// fails saying why while the session goes on. One oversized answer (a
// tool's 17 MiB result) used to end the session, and with it every other
// call in flight.

// codeAnswerTooLarge is the JSON-RPC code of the error that stands in for
// an answer past maxResponseBody. In the range JSON-RPC leaves to
// implementations; the gateway's results say what it means.
const codeAnswerTooLarge = -32097

// oversized scans a JSON-RPC line fed to it in pieces, keeping only what
// identifies its messages: a message (the line's object, or each object
// of the line's batch) is a response when it has an "id" and no "method".
// It tracks strings, escapes and nesting, so an "id" in a message's params
// or result is not taken for the message's own.
type oversized struct {
	size   int64
	depth  int  // of containers open
	batch  bool // the line began with '['
	inStr  bool
	esc    bool
	msgs   []scannedMessage // at most maxScanned
	over   int              // messages past maxScanned, not kept
	cur    *scannedMessage  // the message being read, when depth is at or below its own
	key    []byte           // the message's key being read (its first bytes), when keying
	keying bool             // the string being read is a key of the message
	expect bool             // a key of the message may begin
	field  msgField         // the message's key whose value comes next
	value  []byte           // the id's value so far
	taking bool             // reading the id's value
}

// msgField is a key of a message that the scan keeps.
type msgField uint8

const (
	otherField msgField = iota
	idField
	methodField
)

// scannedMessage is what is known of a message in an oversized line.
type scannedMessage struct {
	id     []byte // its "id" as written (at most maxIDBytes), or empty
	method bool   // it has a "method": a request or a notification
	bad    bool   // its id is longer than any the gateway sends
}

// maxIDBytes bounds an id kept: the gateway's own are short numbers.
const maxIDBytes = 256

// msgDepth is the depth at which the line's messages' keys are.
func (o *oversized) msgDepth() int {
	if o.batch {
		return 2
	}
	return 1
}

func (o *oversized) Write(p []byte) (int, error) {
	o.size += int64(len(p))
	for i := 0; i < len(p); i++ {
		b := p[i]
		if o.inStr {
			if o.esc {
				o.esc = false
				o.keep(b)
				continue
			}
			if !o.keying && !o.taking {
				// The long part of a line is in strings: skip to the next
				// quote or backslash at once.
				j := bytes.IndexAny(p[i:], `"\`)
				if j < 0 {
					break
				}
				i += j
				b = p[i]
			}
			switch b {
			case '\\':
				o.esc = true
				o.keep(b)
			case '"':
				o.inStr = false
				if o.keying {
					o.keying = false
					switch string(o.key) { // no copy: compared, not kept
					case "id":
						o.field = idField
					case "method":
						o.field = methodField
					default:
						o.field = otherField
					}
				} else {
					o.keep(b)
				}
			default:
				o.keep(b)
			}
			continue
		}
		switch b {
		case '"':
			o.inStr = true
			if o.expect && o.depth == o.msgDepth() && o.cur != nil {
				o.expect, o.keying, o.key = false, true, o.key[:0]
			} else {
				o.keep(b)
			}
		case ':':
			if o.depth != o.msgDepth() || o.cur == nil {
				o.keep(b)
				continue
			}
			switch o.field {
			case idField:
				o.taking, o.value = true, o.value[:0]
			case methodField:
				o.cur.method = true
			}
			o.field = otherField
		case ',':
			if o.depth != o.msgDepth() || o.cur == nil {
				o.keep(b)
				continue
			}
			o.endValue()
			o.expect = true
		case '{', '[':
			o.keep(b)
			o.depth++
			switch {
			case o.depth == 1 && b == '[':
				o.batch = true
			case o.depth == o.msgDepth() && b == '{':
				o.next()
			}
		case '}', ']':
			if o.depth == o.msgDepth() && o.cur != nil {
				o.endValue()
				o.cur, o.expect = nil, false
			} else {
				o.keep(b)
			}
			o.depth--
		case ' ', '\t', '\r', '\n':
		default:
			o.keep(b)
		}
	}
	return len(p), nil
}

// reset readies o for another message, keeping its buffers.
func (o *oversized) reset() {
	*o = oversized{msgs: o.msgs[:0], key: o.key[:0], value: o.value[:0]}
}

// keep adds b to the key or the id being read.
func (o *oversized) keep(b byte) {
	switch {
	case o.keying:
		if len(o.key) <= len("method") { // one more: a longer key is none of these
			o.key = append(o.key, b)
		}
	case o.taking:
		if len(o.value) < maxIDBytes {
			o.value = append(o.value, b)
		} else {
			o.cur.bad = true
		}
	}
}

// maxScanned bounds the messages of one line (a batch) that are kept: a
// line or an SSE event without end is read unkept, and each message kept
// costs about 64 bytes. No server has that many answers due at once.
const maxScanned = 4096

// next begins a message, reusing what a message before a reset kept.
// Past maxScanned it is counted, not kept.
func (o *oversized) next() {
	if len(o.msgs) >= maxScanned {
		o.over++
		o.cur, o.expect = nil, false
		return
	}
	if n := len(o.msgs); n < cap(o.msgs) {
		o.msgs = o.msgs[:n+1]
		o.msgs[n] = scannedMessage{id: o.msgs[n].id[:0]}
	} else {
		o.msgs = append(o.msgs, scannedMessage{})
	}
	o.cur, o.expect = &o.msgs[len(o.msgs)-1], true
}

// endValue ends the id's value, if it was being read.
func (o *oversized) endValue() {
	if o.taking {
		o.taking = false
		o.cur.id = append(o.cur.id[:0], o.value...)
	}
}

// answers returns, for each response the line held, a stand-in error
// response to its ID (tooLarge), and how many messages were no response
// (requests and notifications from the server, or what could not be read
// as a message), dropped.
func (o *oversized) answers(exact bool) (stand []jsonrpc.Message, dropped int) {
	for _, m := range o.msgs {
		var raw any
		if m.method || len(m.id) == 0 || m.bad || json.Unmarshal(m.id, &raw) != nil || raw == nil {
			dropped++
			continue
		}
		id, err := jsonrpc.MakeID(raw)
		if err != nil { // an id that is no JSON-RPC ID
			dropped++
			continue
		}
		stand = append(stand, tooLarge(id, o.size, exact))
	}
	dropped += o.over
	if len(o.msgs) == 0 {
		dropped = 1
	}
	return stand, dropped
}

// tooLarge is the error response that stands in for the answer to id,
// of size bytes (at least, unless exact), past maxResponseBody.
func tooLarge(id jsonrpc.ID, size int64, exact bool) *jsonrpc.Response {
	n := fmt.Sprintf("%d bytes", size)
	if !exact {
		n = "more than " + n
	}
	return &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
		Code:    codeAnswerTooLarge,
		Message: fmt.Sprintf("its answer was larger than the %d MiB a message may be (%s), so it was dropped", maxResponseBody>>20, n),
	}}
}
