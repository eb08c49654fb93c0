package mcpsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/tools"
)

// A plain tools/call to a stdio server is sent by the gateway itself, on
// the session's connection (rpc, as tasks.go does), rather than by the
// SDK's ClientSession.CallTool. CallTool decodes each response twice more
// after the connection has (the result into a map, then into
// CallToolResult), each decode with a decoder of its own holding a 32 KiB
// buffer: most of what a forwarded call allocated, and the garbage
// collector's work with it. Here the result is decoded once, with
// encoding/json, and structured content is kept as the server wrote it.
//
// Only where nothing else of the SDK's is needed: a stdio connection
// (which the gateway reads whole, see wire.go) that negotiated a protocol
// before 2026-07-28. From that version on the SDK adds per-request _meta
// (SEP-2575) and handles multi-round-trip results, and over streamable
// HTTP it sets headers from the tool's schema; those calls keep going
// through CallTool.

// sdkCalls sends every call through the SDK, for benchmarks comparing the
// two paths.
var sdkCalls = false

// directCalls reports whether cs's plain tools/calls go through callDirect.
func directCalls(cs *mcp.ClientSession, hs *httpSession) bool {
	if hs != nil || sdkCalls {
		return false
	}
	ir := cs.InitializeResult()
	return ir != nil && ir.ProtocolVersion < "2026-07-28"
}

// callParams are a tools/call request's params.
type callParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      struct {
		ProgressToken string `json:"progressToken"`
	} `json:"_meta"`
}

// callDirect forwards one call of remote as a tools/call request of the
// gateway's own. When ctx ends first the server is told, with
// notifications/cancelled, as the SDK would.
func (s *server) callDirect(ctx context.Context, r *rpc, remote string, args json.RawMessage, token string) (*tools.Result, error) {
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	p := callParams{Name: remote, Arguments: args}
	p.Meta.ProgressToken = token
	resp, id, err := r.sendID(ctx, "tools/call", &p)
	if err != nil {
		if ctx.Err() != nil && id != "" {
			r.cancelled(context.WithoutCancel(ctx), id, ctx.Err())
		}
		if errors.Is(err, errClosed) {
			err = errClosed // not which request: it is the call
		}
		return s.failed(ctx, nil, r, err)
	}
	if resp.Error != nil {
		return s.failed(ctx, nil, r, resp.Error)
	}
	out, err := decodeResult(resp.Result)
	if err != nil {
		return tools.Errorf("MCP server %q answered the call with a result that cannot be read: %v", s.cfg.Name, err), nil
	}
	return out, nil
}

// cancelled tells the server that the request id is cancelled.
func (r *rpc) cancelled(ctx context.Context, id string, why error) {
	jid, err := jsonrpc.MakeID(id)
	if err != nil {
		return
	}
	r.cancelID(ctx, jid, why)
}

// cancelID tells the server that the request jid is cancelled.
func (r *rpc) cancelID(ctx context.Context, jid jsonrpc.ID, why error) {
	p, _ := json.Marshal(map[string]any{"requestId": jid.Raw(), "reason": why.Error()})
	ctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	_ = r.conn.Write(ctx, &jsonrpc.Request{Method: "notifications/cancelled", Params: p})
}

// wireContent is the part of a content block the common kinds need.
type wireContent struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Data     []byte `json:"data"`
	MIMEType string `json:"mimeType"`
}

// maxContentBlocks bounds the content blocks of a result that are
// converted; the rest are counted and left out, with a marker. A block of
// a few bytes on the wire held a few hundred once decoded and converted
// (600,000 empty text blocks, 15.6 MB, raised the process's peak RSS by
// 240 MB). It is the number the engine keeps under the default
// max_result_bytes (max_result_bytes/16).
const maxContentBlocks = 1 << 14

// decodeResult converts a tools/call result. Content blocks are decoded one
// at a time, at most maxContentBlocks of them: text and image blocks here,
// any other kind by the SDK's CallToolResult, one block at a time, and
// converted by content. Structured content is kept as the server wrote it.
func decodeResult(raw json.RawMessage) (*tools.Result, error) {
	var w struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("decoding the tools/call result: %w", err)
	}
	out := &tools.Result{IsError: w.IsError}
	if err := decodeContent(w.Content, out); err != nil {
		return nil, fmt.Errorf("decoding the tools/call result: %w", err)
	}
	if len(w.StructuredContent) > 0 && !bytes.Equal(w.StructuredContent, []byte("null")) {
		var b bytes.Buffer
		if err := json.Compact(&b, w.StructuredContent); err != nil {
			return nil, errors.New("decoding the tools/call result: structured content is not JSON")
		}
		out.StructuredContent = b.Bytes()
	}
	return out, nil
}

// decodeContent appends the blocks of raw, a JSON array (or nothing, or
// null), to out: at most maxContentBlocks, the last of them, when there
// were more, a marker saying how many more.
func decodeContent(raw json.RawMessage, out *tools.Result) error {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	if t, err := d.Token(); err != nil || t != json.Delim('[') {
		return errors.New("content is not an array")
	}
	// The last place is the marker's only when more blocks follow: a
	// result of exactly maxContentBlocks keeps them all, as result does.
	var block, last json.RawMessage // block is reused: past the bound, blocks are only read
	left := 0
	for d.More() {
		if err := d.Decode(&block); err != nil {
			return err
		}
		switch {
		case len(out.Content) < maxContentBlocks-1:
			if err := appendBlock(block, out); err != nil {
				return err
			}
		case last == nil:
			last = slices.Clone(block)
		default:
			left++
		}
	}
	if last != nil && left == 0 {
		return appendBlock(last, out)
	}
	if last != nil {
		out.Content = append(out.Content, leftOut(left+1))
	}
	return nil
}

// appendBlock converts one content block: text and images here, any
// other kind by the SDK's CallToolResult.
func appendBlock(block json.RawMessage, out *tools.Result) error {
	var c wireContent
	if err := json.Unmarshal(block, &c); err != nil {
		return err
	}
	switch c.Type {
	case "text":
		out.Content = append(out.Content, tools.Content{Text: c.Text})
	case "image":
		out.Content = append(out.Content, tools.Content{Data: c.Data, MIMEType: c.MIMEType})
	default:
		var r mcp.CallToolResult
		if err := json.Unmarshal(append(append([]byte(`{"content":[`), block...), "]}"...), &r); err != nil {
			return err
		}
		for _, b := range r.Content {
			out.Content = append(out.Content, content(b))
		}
	}
	return nil
}

// leftOut is the marker of a result's last n blocks, left out.
func leftOut(n int) tools.Content {
	return tools.Content{Text: fmt.Sprintf("[%d more content blocks left out: past the first %d]", n, maxContentBlocks-1)}
}

// A call the gateway makes through the SDK's ClientSession.CallTool is
// told to its server as cancelled by the gateway too, when its context
// ends: the SDK tells it on a goroutine of its own once the call has
// returned, and a session closing by then refuses to send it. A session
// closes once its calls have returned (rpc.drain) when a reload removed or
// changed its server, so a call cut after that reload left the server's
// work running, one more per reload, and, over streamable HTTP, the call
// waited up to 5 s for the session's DELETE, which the server held while
// that work ran. Its JSON-RPC ID, the SDK's, is caught as the request
// leaves: wireConn.Write over stdio, httpSession.RoundTrip over HTTP.

// sentCall holds the ID of a call's tools/call request once it is sent.
// It also learns when the SDK's notifications/cancelled for the call has
// been written (noticed), which the SDK sends on a goroutine of its own
// after the call has returned, with the call's context.
type sentCall struct {
	mu   sync.Mutex
	id   jsonrpc.ID
	sent bool

	noticeOnce sync.Once
	notice     chan struct{} // closed once the SDK's cancellation notice was written
}

type sentCallKey struct{}

// withSentCall returns ctx carrying a sentCall for the call made with it.
func withSentCall(ctx context.Context) (context.Context, *sentCall) {
	c := &sentCall{notice: make(chan struct{})}
	return context.WithValue(ctx, sentCallKey{}, c), c
}

// noticed records that the call's cancellation notice was written, or
// failed to be: either way the SDK will not send it again.
func (c *sentCall) noticed() { c.noticeOnce.Do(func() { close(c.notice) }) }

// isNotice reports whether msg is a notifications/cancelled.
func isNotice(msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	return ok && req.Method == "notifications/cancelled"
}

// awaitNotice waits until the SDK's cancellation notice for the call was
// written (or failed to be), the session ended, or cancelTimeout passed
// (the SDK's own bound on sending it), and reports whether it was. A call
// waits for it before it ends: the session's close waits for its calls
// (rpc.drain), and from its start the SDK refuses to send, so a notice
// still on its way when the call ended was lost to a reload that closed
// the session then, and the server's work ran on.
func (c *sentCall) awaitNotice(ended <-chan struct{}) bool {
	t := time.NewTimer(cancelTimeout)
	defer t.Stop()
	select {
	case <-c.notice:
		return true
	case <-ended:
	case <-t.C:
	}
	return false
}

// sentCallOf is the sentCall ctx carries, or nil.
func sentCallOf(ctx context.Context) *sentCall {
	c, _ := ctx.Value(sentCallKey{}).(*sentCall)
	return c
}

// note records msg's ID when it is the call's tools/call request; the
// SDK's own notifications/cancelled carries the call's context too.
func (c *sentCall) note(msg jsonrpc.Message) {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" {
		c.set(req.ID)
	}
}

func (c *sentCall) set(id jsonrpc.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.sent {
		c.id, c.sent = id, true
	}
}

// ID returns the request's ID, once it was sent.
func (c *sentCall) ID() (jsonrpc.ID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id, c.sent
}

// noteBody records the ID of the tools/call request a POST carries, and
// reports whether the POST is a notifications/cancelled (the SDK's for the
// call: it has the call's context). The SDK writes a request as
// {"jsonrpc":"2.0","id":…,"method":…,"params":…} and a notification as
// {"jsonrpc":"2.0","method":…,"params":…}, so only the body's start is
// read, however large the call's arguments; a request written otherwise
// is not noted, and the call's cancellation is the SDK's alone to send.
func (c *sentCall) noteBody(r *http.Request) bool {
	if r.Method != http.MethodPost || r.GetBody == nil {
		return false
	}
	body, err := r.GetBody()
	if err != nil {
		return false
	}
	defer body.Close()
	head := make([]byte, 128)
	n, _ := io.ReadFull(body, head)
	if bytes.HasPrefix(head[:n], []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled"`)) {
		return true
	}
	_, rest, ok := bytes.Cut(head[:n], []byte(`"id":`))
	if !ok {
		return false
	}
	raw, _, ok := bytes.Cut(rest, []byte(`,"method":"tools/call"`))
	if !ok {
		return false
	}
	var v any // as MakeID takes it: a number as a float64, or a string
	if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		v = float64(i)
	} else if str, err := strconv.Unquote(string(raw)); err == nil {
		v = str
	} else {
		return false
	}
	if id, err := jsonrpc.MakeID(v); err == nil {
		c.set(id)
	}
	return false
}
