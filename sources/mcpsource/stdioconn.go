package mcpsource

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// stdioConn is a stdio server's connection: newline-delimited JSON-RPC
// over its stdout and stdin, read on the caller's goroutine and decoded
// once.
//
// The SDK's connection reads on a goroutine of its own and hands each
// message over a channel, then decodes it up to three times (as a batch
// first, then as a message, then its method), each with a fresh decoder
// whose buffer is tens of KiB: a server's 100,000 progress notifications
// cost 6.7 s of CPU, half of it in those decodes and the collector behind
// them; and every response crossed one more goroutine on its way to its
// call.
//
// Each line is a message or a batch of them, at most maxResponseBody (16
// MiB, the SDK's own bound); a line past it is read to its end unkept, the
// calls it answered failing saying so and the session going on
// (oversized); a message pretty-printed over several lines
// is read too, as the SDK reads it, though a line that is a message alone
// is one, whatever came before it. A line that is no JSON-RPC message
// (most often a server's logs, which belong on stderr) is logged as the
// server's stderr is and skipped, as the official TypeScript and Python
// clients skip it, where the SDK ended the session on it, so that a server
// those clients run runs here. A message pretty-printed past the bound
// ends the session, saying so (lostCause), as does a failed read. Close
// closes the process (stdin first, as MCP says), which closes its stdout
// once it has exited, ending a Read under way.
type stdioConn struct {
	p     *process
	log   *slog.Logger
	r     *bufio.Reader
	line  []byte            // the line being read, when it is longer than r's buffer
	again []byte            // a line to read again alone, after a value it did not go on
	queue []jsonrpc.Message // the rest of a batch
	over  *oversized        // the line past the bound just read

	wsem  chan struct{} // one Write at a time (capacity 1), waited for as long as its context lets it
	grace time.Duration // how long a message begun may take to finish once its context has ended

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool

	lost atomic.Pointer[error] // why reading ended, when the server's output did
}

func newStdioConn(p *process, log *slog.Logger, grace time.Duration) *stdioConn {
	return &stdioConn{p: p, log: log, grace: grace, r: bufio.NewReaderSize(stdoutReader{p.stdout}, 64<<10), wsem: make(chan struct{}, 1)}
}

// errLineTooLong ends a connection whose server sent a longer message than
// any it may (the same bound as a streamable HTTP response's).
var errLineTooLong = errResponseTooLarge

// readLine returns the next line without its newline, or what is left at
// the end of the stream; at most maxResponseBody bytes, past which it is
// errOversized. The line is valid until the next call.
func (c *stdioConn) readLine() ([]byte, error) {
	c.line = c.line[:0]
	for {
		frag, err := c.r.ReadSlice('\n')
		if len(c.line)+len(frag) > maxResponseBody {
			return nil, c.readOversized(frag, err)
		}
		if err == bufio.ErrBufferFull {
			c.line = append(c.line, frag...)
			continue
		}
		if len(c.line) > 0 {
			c.line = append(c.line, frag...)
			frag = c.line
		}
		if len(frag) > 0 && err == io.EOF {
			err = nil // the last line, without its newline; the next read ends
		}
		return bytes.TrimSuffix(frag, []byte("\n")), err
	}
}

// errOversized is readLine's when the line was past maxResponseBody: it
// was read to its end and scanned (c.over), not kept.
var errOversized = errors.New("a line past the bound, scanned")

// readOversized reads the rest of a line past maxResponseBody, of which
// c.line and frag (with err, ReadSlice's) were read, through a scan that
// keeps what identifies its messages (c.over), and returns errOversized,
// or the error that ended reading first. A server that writes a line
// without end is a server that answers nothing: its calls end by their
// deadlines and the liveness check gives it up (alive.go).
func (c *stdioConn) readOversized(frag []byte, err error) error {
	o := &oversized{}
	o.Write(c.line)
	for {
		o.Write(frag)
		if err != bufio.ErrBufferFull {
			break
		}
		frag, err = c.r.ReadSlice('\n')
	}
	if cap(c.line) > 1<<20 {
		c.line = nil // not kept for the lines after it
	}
	if err != nil && err != io.EOF { // at EOF, the line ended unended
		return err
	}
	c.over = o
	return errOversized
}

// dropOversized logs the oversized line just read and returns the
// stand-ins for the answers it held (see oversized).
func (c *stdioConn) dropOversized() []jsonrpc.Message {
	o := c.over
	c.over = nil
	stand, dropped := o.answers(true)
	c.log.Warn("MCP server sent a message past the bound; dropped", "bytes", o.size, "bound_bytes", maxResponseBody, "answers_failed", len(stand), "messages_dropped", dropped)
	return stand
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
	for {
		line := c.again
		c.again = nil
		if line == nil {
			var err error
			if line, err = c.readLine(); err == errOversized {
				if stand := c.dropOversized(); len(stand) > 0 {
					c.queue = stand[1:]
					return stand[0], nil
				}
				continue
			} else if err != nil {
				return nil, c.readFailed(err)
			}
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		msgs, err := decodeLine(line)
		switch {
		case err == nil:
		case (line[0] == '{' || line[0] == '[') && incomplete(line):
			if msgs, err = c.readValue(line); err != nil {
				return nil, c.readFailed(err)
			}
		default:
			c.skip(line, err)
		}
		if len(msgs) > 0 {
			c.queue = msgs[1:]
			return msgs[0], nil
		}
	}
}

// readFailed returns why reading ended: io.EOF once the connection was
// closed, else err, noted by lose.
func (c *stdioConn) readFailed(err error) error {
	if c.closed.Load() && errors.Is(err, os.ErrClosed) {
		err = io.EOF
	}
	return c.lose(err)
}

// readValue reads a JSON value that first begins and goes on past its
// line, such as a message pretty-printed over lines, and returns its
// messages, or none when it is no message (it is logged and skipped), or
// the error that ended reading. Its lines go to one json.Decoder, which
// scans each byte once: decoding all the lines so far at each new line
// took 98 s of CPU for a 430 KiB message over 40,000 lines.
//
// A line that is a message alone is one: what came before it began none
// ("[", a log line cut short), and read with it the message was lost.
// A line that the value cannot go on with is read again alone, as is
// the last line of a value followed by more than space.
func (c *stdioConn) readValue(first []byte) ([]jsonrpc.Message, error) {
	buf := append(slices.Clip(first), '\n') // a copy: first is valid until the next read
	first = buf[:len(first)]
	v := &valueLines{c: c, data: buf, size: len(buf)}
	d := json.NewDecoder(v)
	var raw json.RawMessage
	err := d.Decode(&raw)
	switch {
	case v.err != nil:
		return nil, v.err
	case v.alone != nil:
		c.skip(first, errors.New("not a JSON value"))
		return v.alone, nil
	case err != nil || !onlySpace(d.Buffered()) || len(bytes.TrimSpace(v.data)) > 0:
		c.skip(first, errors.New("not a JSON value"))
		c.again = v.last
		return nil, nil
	}
	msgs, err := decodeLine(raw)
	if err != nil {
		c.skip(raw, err)
	}
	return msgs, nil
}

// valueLines feeds the lines of a value that goes on to its decoder.
type valueLines struct {
	c     *stdioConn
	data  []byte // what is left of the line being fed
	last  []byte // the last line fed, to be read again alone
	size  int    // the value's bytes so far
	alone []jsonrpc.Message
	err   error // why reading ended
}

// errValueEnded stops a value's decoder: a line was a message alone, or
// reading ended.
var errValueEnded = errors.New("the value ended")

func (v *valueLines) Read(p []byte) (int, error) {
	for len(v.data) == 0 {
		if v.err != nil || v.alone != nil {
			return 0, errValueEnded
		}
		line, err := v.c.readLine()
		if err == errOversized {
			v.c.over = nil
			err = errLineTooLong // the value is past the bound too
		}
		if err != nil {
			v.err = err
			return 0, errValueEnded
		}
		if msgs, ok := messageLine(line); ok {
			v.alone = msgs
			return 0, errValueEnded
		}
		if v.size += len(line) + 1; v.size > maxResponseBody {
			v.err = errLineTooLong
			return 0, errValueEnded
		}
		buf := append(slices.Clip(line), '\n') // a copy: line is valid until the next read
		v.last, v.data = buf[:len(line)], buf
	}
	n := copy(p, v.data)
	v.data = v.data[n:]
	return n, nil
}

// onlySpace reports whether r holds nothing but JSON white space.
func onlySpace(r io.Reader) bool {
	b, _ := io.ReadAll(r)
	return len(bytes.TrimSpace(b)) == 0
}

// skip logs a line of the server's stdout that is no message, as its
// stderr's lines are logged.
func (c *stdioConn) skip(line []byte, err error) {
	c.log.Info("MCP server stdout, not JSON-RPC; skipped", "line", string(line[:min(len(line), maxLine)]), "error", err)
}

// messageLine decodes line alone, when it is a message or a batch of
// them. Only a line that may be one, a JSON object or array, is decoded.
func messageLine(line []byte) ([]jsonrpc.Message, bool) {
	line = bytes.TrimSpace(line)
	if len(line) < 2 || (line[0] != '{' || line[len(line)-1] != '}') && (line[0] != '[' || line[len(line)-1] != ']') {
		return nil, false
	}
	msgs, err := decodeLine(line)
	return msgs, err == nil
}

// decodeLine decodes a line: a message, or a batch of them.
func decodeLine(data []byte) ([]jsonrpc.Message, error) {
	if data[0] != '[' {
		msg, err := decodeMessage(data)
		if err != nil {
			return nil, err
		}
		return []jsonrpc.Message{msg}, nil
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(data, &batch); err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		return nil, errors.New("an empty batch")
	}
	msgs := make([]jsonrpc.Message, len(batch))
	for i, m := range batch {
		var err error
		if msgs[i], err = decodeMessage(m); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// incomplete reports whether data is the start of a JSON value that goes on.
func incomplete(data []byte) bool {
	var v json.RawMessage
	return json.NewDecoder(bytes.NewReader(data)).Decode(&v) == io.ErrUnexpectedEOF
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
// line past the bound, or a failed read. c may be nil.
func (c *stdioConn) lostCause() error {
	if c == nil {
		return nil
	}
	if p := c.lost.Load(); p != nil {
		return *p
	}
	return nil
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
	// A server that reads nothing fills its stdin's pipe, and a write
	// (with every one queued behind it) would wait for it past the
	// call's end: each waits only as long as its context lets it, and a
	// message begun grace more (see process.write).
	select {
	case c.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.wsem }()
	n, err := c.p.write(ctx, data, c.grace)
	if err != nil && n > 0 {
		// Part of a message went: what follows it would not parse.
		cause := fmt.Errorf("a message to the server was cut short, %d of its %d bytes written (%w)", n, len(data), err)
		c.lost.CompareAndSwap(nil, &cause)
		go c.Close() // which waits for the process; the session's close waits for it in turn
	}
	return err
}

// giveUp ends a connection whose server stopped answering (see alive.go):
// cause is its lostCause, and it is closed.
func (c *stdioConn) giveUp(cause error) {
	c.lost.CompareAndSwap(nil, &cause)
	_ = c.Close()
}

func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closeErr = c.p.Close()
	})
	return c.closeErr
}

func (c *stdioConn) SessionID() string { return "" }
