package mcpsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/tools"
)

// MCP Tasks (spec 2025-11-25, "tasks"): a tool that declares
// execution.taskSupport "required" must be called task-augmented. The call
// answers at once with a task; the client polls tasks/get until the task
// ends, fetches the tool's result with tasks/result, and cancels with
// tasks/cancel. The go-sdk (v1.8.0) implements none of it and can send no
// method it does not know, so the gateway sends these requests itself on the
// session's connection (rpc), and takes their responses off the wire like
// progress (see wire.go).

// rpcIDPrefix marks the IDs of the gateway's own requests; the SDK numbers
// its requests, so the two never collide, and the SDK ignores responses to
// IDs it did not send.
const rpcIDPrefix = "toolwire-rpc-"

// Bounds on the poll interval a server suggests.
const (
	minPoll     = 50 * time.Millisecond
	defaultPoll = time.Second
	maxPoll     = 5 * time.Second
	// cancelTimeout bounds a tasks/cancel sent after the call has returned.
	cancelTimeout = 5 * time.Second
)

// rpc sends requests of the gateway's own on one session's connection.
type rpc struct {
	conn  mcp.Connection
	ended <-chan struct{} // the session has ended

	mu       sync.Mutex
	seq      uint64
	waiting  map[string]chan *jsonrpc.Response
	calls    map[*flight]struct{} // the session's calls in flight, whichever way they go
	idle     chan struct{}        // closed when calls drops to 0, for drain
	draining bool                 // the session is closing: drain has begun
	checking bool                 // a liveness check is under way (see alive.go)
}

// A flight is one call in flight on the session.
type flight struct {
	ctx  context.Context
	done chan struct{} // closed by end; made only for a liveness check that waits for it
}

// begin and end bracket a call the session's close waits for (drain).
func (r *rpc) begin(ctx context.Context) *flight {
	f := &flight{ctx: ctx}
	r.mu.Lock()
	r.calls[f] = struct{}{}
	r.mu.Unlock()
	return f
}

func (r *rpc) end(f *flight) {
	r.mu.Lock()
	delete(r.calls, f)
	if f.done != nil {
		close(f.done)
	}
	if len(r.calls) == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
	r.mu.Unlock()
}

// drain returns once no call begun is in flight: they finish on the
// session before it closes. The SDK's Close waits for its calls too, but
// from its start refuses to send anything, so a call cancelled meanwhile
// could not tell the server (notifications/cancelled), whose work ran on:
// every call, through the SDK or not, is begun (server.handler).
func (r *rpc) drain() {
	r.mu.Lock()
	r.draining = true
	if len(r.calls) == 0 {
		r.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	r.idle = idle
	r.mu.Unlock()
	<-idle
}

// closing reports whether the session has begun to close (drain).
func (r *rpc) closing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.draining
}

// errClosed is why a request got no response: the session ended.
var errClosed = errors.New("the connection closed")

func newRPC(conn mcp.Connection, ended <-chan struct{}) *rpc {
	return &rpc{conn: conn, ended: ended, waiting: map[string]chan *jsonrpc.Response{}, calls: map[*flight]struct{}{}}
}

// call sends a request and decodes its result into result.
func (r *rpc) call(ctx context.Context, method string, params, result any) error {
	resp, err := r.send(ctx, method, params)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return fmt.Errorf("%s: %w", method, resp.Error)
	}
	return json.Unmarshal(resp.Result, result)
}

// send sends a request and returns the server's response, an error
// response included.
func (r *rpc) send(ctx context.Context, method string, params any) (*jsonrpc.Response, error) {
	resp, _, err := r.sendID(ctx, method, params)
	return resp, err
}

// sendID is send, also returning the request's ID once it was made.
func (r *rpc) sendID(ctx context.Context, method string, params any) (_ *jsonrpc.Response, id string, _ error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, "", err
	}
	r.mu.Lock()
	r.seq++
	id = fmt.Sprintf("%s%d", rpcIDPrefix, r.seq)
	ch := make(chan *jsonrpc.Response, 1)
	r.waiting[id] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, id)
		r.mu.Unlock()
	}()
	jid, err := jsonrpc.MakeID(id)
	if err != nil {
		return nil, "", err
	}
	if err := r.conn.Write(ctx, &jsonrpc.Request{ID: jid, Method: method, Params: p}); err != nil {
		return nil, "", fmt.Errorf("sending %s: %w", method, err)
	}
	select {
	case resp := <-ch:
		return resp, id, nil
	case <-ctx.Done():
		return nil, id, ctx.Err()
	case <-r.ended:
		return nil, id, fmt.Errorf("%s: %w", method, errClosed)
	}
}

// deliver hands a response to the request waiting for it, reporting
// whether the response was to one of the gateway's own requests.
func (r *rpc) deliver(resp *jsonrpc.Response) bool {
	id, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(id, rpcIDPrefix) {
		return false
	}
	r.mu.Lock()
	ch := r.waiting[id]
	r.mu.Unlock()
	if ch != nil {
		ch <- resp // buffered, and sent to once
	}
	return true
}

// task is the state of an MCP task, as tasks/get returns it.
type task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	PollInterval  *int64 `json:"pollInterval,omitempty"` // milliseconds
}

func (t *task) done() bool {
	return t.Status == "completed" || t.Status == "failed" || t.Status == "cancelled"
}

func (t *task) poll() time.Duration {
	if t.PollInterval == nil {
		return defaultPoll
	}
	return min(max(time.Duration(*t.PollInterval)*time.Millisecond, minPoll), maxPoll)
}

// callTask runs a call of remote as an MCP task: its status messages become
// progress reports, and cancelling ctx cancels the task.
func (s *server) callTask(ctx context.Context, r *rpc, hs *httpSession, remote string, args json.RawMessage, token string, fwd *forwarder) (*tools.Result, error) {
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	var created struct {
		Task *task `json:"task"`
	}
	params := map[string]any{
		"name": remote, "arguments": args, "task": map[string]any{},
		"_meta": map[string]any{"progressToken": token},
	}
	if err := r.call(ctx, "tools/call", params, &created); err != nil {
		return s.failed(ctx, hs, r, err)
	}
	t := created.Task
	if t == nil || t.TaskID == "" {
		return tools.Errorf("MCP server %q answered a task-augmented call without a task", s.cfg.Name), nil
	}
	if s.g.onTask != nil {
		s.g.onTask(r, t.TaskID)
	}
	defer func() {
		if ctx.Err() != nil && !t.done() {
			// Off the call's return path, so a slow server cannot hold the
			// cancelled call; bounded, and ended with the session.
			s.g.cancels.Go(func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
				defer cancel()
				var ignored task
				if err := r.call(cctx, "tasks/cancel", map[string]string{"taskId": t.TaskID}, &ignored); err != nil {
					s.log.Warn("cancelling an MCP task", "task", t.TaskID, "error", err)
				}
			})
		}
	}()
	said := ""
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if t.StatusMessage != "" && t.StatusMessage != said {
			said = t.StatusMessage
			fwd.add(tools.Progress{Message: said})
		}
		if t.done() {
			break
		}
		timer.Reset(t.poll())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
		var next task
		if err := r.call(ctx, "tasks/get", map[string]string{"taskId": t.TaskID}, &next); err != nil {
			return s.failed(ctx, hs, r, err)
		}
		if next.TaskID == "" {
			next.TaskID = t.TaskID
		}
		*t = next
	}
	var res mcp.CallToolResult
	if err := r.call(ctx, "tasks/result", map[string]string{"taskId": t.TaskID}, &res); err != nil {
		if t.Status != "completed" {
			return tools.Errorf("MCP server %q: the task %s %s: %v", s.cfg.Name, t.TaskID, t.Status, err), nil
		}
		return s.failed(ctx, hs, r, err)
	}
	out := result(&res)
	if t.Status != "completed" && !out.IsError {
		// A failed or cancelled task's result is an error however it reads.
		out.IsError = true
		out.Content = append(out.Content, tools.Content{Text: fmt.Sprintf("[MCP task %s %s]", t.TaskID, t.Status)})
	}
	return out, nil
}

// failed is the result of a forwarded call the server or the connection
// failed: ctx's error when the call was cancelled, the server's message
// when it answered with an error, and otherwise, the connection having
// broken before an answer, a result saying that the server went away, with
// the cause, cut short, at the end: why hs gave the session up, or why a
// stdio server's output could not be read (r's connection), when either
// did, or else the SDK's.
func (s *server) failed(ctx context.Context, hs *httpSession, r *rpc, err error) (*tools.Result, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	cause := hs.lostCause()
	if sc, ok := r.connection().(*stdioConn); ok && cause == nil {
		cause = sc.lostCause()
	}
	// A session given up ends its requests in flight, which the SDK may
	// report as its transport's rejection: the cause comes first.
	var werr *jsonrpc.Error
	if cause == nil && errors.As(err, &werr) {
		switch werr.Code {
		case codeClientClosing, codeServerClosing: // the connection's, below
		case codeAnswerTooLarge: // its stand-in (oversize.go)
			return tools.Errorf("MCP server %q answered the call, but %s; the session goes on", s.cfg.Name, werr.Message), nil
		default:
			return tools.Errorf("MCP server %q failed the call: %s", s.cfg.Name, werr.Message), nil
		}
	}
	if cause != nil {
		if errors.Is(cause, errResponseTooLarge) {
			return tools.Errorf("MCP server %q: %s; the session was given up, with its calls in flight", s.cfg.Name, cause), nil
		}
		err = cause // what the SDK says is the consequence: the connection closed
	}
	return tools.Errorf("MCP server %q went away during the call: no answer came, so the call may or may not have run (%s)", s.cfg.Name, shortCause(err)), nil
}

// The SDK's JSON-RPC codes for a request its own connection ended
// (jsonrpc2.ErrClientClosing, ErrServerClosing; internal to the SDK).
const (
	codeClientClosing = -32003
	codeServerClosing = -32004
)

// sdkNoise is what the SDK's transport errors say that tells the model
// nothing: which request (it is the call) and the session's ID.
var sdkNoise = regexp.MustCompile(`(calling|sending) "[^"]*": | \(session ID: [^)]*\)`)

// shortCause is err's text without sdkNoise, at most 200 bytes.
func shortCause(err error) string {
	c := sdkNoise.ReplaceAllString(err.Error(), "")
	if len(c) > 200 {
		c = strings.ToValidUTF8(c[:200], "") + "…"
	}
	return c
}

// connection is the session's connection; r may be nil.
func (r *rpc) connection() mcp.Connection {
	if r == nil {
		return nil
	}
	return r.conn
}
