package mcpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// stdioConn is a stdio server's connection: newline-delimited JSON-RPC
// over its stdout and stdin, as the SDK's mcp.IOTransport speaks it, read
// on the caller's goroutine and decoded once.
//
// The SDK's connection reads on a goroutine of its own and hands each
// message over a channel, then decodes it up to three times (as a batch
// first, then as a message, then its method), each with a fresh decoder
// whose buffer is tens of KiB: a server's 100,000 progress notifications
// cost 6.7 s of CPU, half of it in those decodes and the collector behind
// them; and every response crossed one more goroutine on its way to its
// call.
//
// What is read is what the SDK reads: one JSON value after another (a
// value split over lines too), each followed by a newline or the end of
// the stream, at most maxResponseBody (16 MiB, the SDK's own bound) each, a
// message or a batch of them. What ends the reading other than the end of
// the stream is kept (lostCause), for the errors the session's end gives. Close closes the process (stdin first, as MCP says), which
// closes its stdout once it has exited, ending a Read under way.
type stdioConn struct {
	p     *process
	dec   *json.Decoder
	limit *frameLimit
	queue []jsonrpc.Message // the rest of a batch

	wmu sync.Mutex // Write must be safe for concurrent use

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool

	lost atomic.Pointer[error] // why reading ended, when the server's output did
}

func newStdioConn(p *process) *stdioConn {
	limit := &frameLimit{r: stdoutReader{p.stdout}, limit: maxResponseBody}
	return &stdioConn{p: p, dec: json.NewDecoder(limit), limit: limit}
}

// errLineTooLong ends a connection whose server sent a longer message than
// any it may (the same bound as a streamable HTTP response's).
var errLineTooLong = errResponseTooLarge

// frameLimit bounds the bytes read for one message.
type frameLimit struct {
	r     io.Reader
	limit int
	count int
}

func (f *frameLimit) Read(b []byte) (int, error) {
	if f.count >= f.limit {
		return 0, errLineTooLong
	}
	if len(b) > f.limit-f.count {
		b = b[:f.limit-f.count]
	}
	n, err := f.r.Read(b)
	f.count += n
	return n, err
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.closed.Load() {
		return nil, io.EOF
	}
	if len(c.queue) > 0 {
		msg := c.queue[0]
		c.queue = c.queue[1:]
		return msg, nil
	}
	var raw json.RawMessage
	err := c.dec.Decode(&raw)
	if err == nil {
		// Something other than a newline after the value (two values
		// on a line) is not this protocol.
		var next [1]byte
		if n, _ := c.dec.Buffered().Read(next[:]); n > 0 && next[0] != '\n' && next[0] != '\r' {
			err = errors.New("invalid trailing data at the end of a message")
		}
	}
	c.limit.count = 0
	if err != nil {
		if c.closed.Load() && errors.Is(err, os.ErrClosed) {
			err = io.EOF
		}
		return nil, c.lose(err)
	}
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) > 0 && raw[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(raw, &batch); err != nil {
			return nil, c.lose(err)
		}
		if len(batch) == 0 {
			return nil, c.lose(errors.New("an empty batch"))
		}
		msgs := make([]jsonrpc.Message, len(batch))
		for i, m := range batch {
			if msgs[i], err = decodeMessage(m); err != nil {
				return nil, c.lose(err)
			}
		}
		c.queue = msgs[1:]
		return msgs[0], nil
	}
	msg, err := decodeMessage(raw)
	if err != nil {
		return nil, c.lose(err)
	}
	return msg, nil
}

// lose notes why reading ended, unless the stream simply did (the server
// exited, or the connection was closed), and returns err: what the SDK
// makes of it is only that the connection closed.
func (c *stdioConn) lose(err error) error {
	if !errors.Is(err, io.EOF) {
		c.lost.CompareAndSwap(nil, &err)
	}
	return err
}

// lostCause says why the server's output could not be read, or nil: a
// message past the bound, or something that is not JSON-RPC (most often a
// server that writes its logs to stdout). c may be nil.
func (c *stdioConn) lostCause() error {
	if c == nil {
		return nil
	}
	p := c.lost.Load()
	switch {
	case p == nil:
		return nil
	case errors.Is(*p, errResponseTooLarge), errors.Is(*p, errHeldOpen):
		return *p
	}
	return fmt.Errorf("the server wrote something other than a JSON-RPC message on its stdout (%w); a stdio server must write only its messages there, and its logs to stderr", *p)
}

// wireMessage is a JSON-RPC message as it is sent.
type wireMessage struct {
	Version string          `json:"jsonrpc"`
	ID      any             `json:"id,omitempty"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// decodeMessage is jsonrpc.DecodeMessage, in one decoding.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	if w.Version != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected %q", w.Version, "2.0")
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil, err
	}
	if w.Method != nil {
		return &jsonrpc.Request{ID: id, Method: *w.Method, Params: w.Params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("a response without an ID")
	}
	resp := &jsonrpc.Response{ID: id, Result: w.Result}
	if w.Error != nil { // not a typed nil
		resp.Error = w.Error
	}
	return resp, nil
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("marshaling message: %v", err)
	}
	data = append(data, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.p.Write(data)
	return err
}

func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closeErr = c.p.Close()
	})
	return c.closeErr
}

func (c *stdioConn) SessionID() string { return "" }
