// Package testserver is a real MCP server, built with the MCP Go SDK, that
// the gateway's tests talk to: in process over streamable HTTP, and as a
// child process over stdio (package stdio).
//
// It is for the gateway's tests and imports only the MCP SDK; no non-test
// package may import it.
package testserver

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// PNG is the image the image tool returns: a 1x1 PNG.
var PNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89")

// Hooks let a test observe the slow tool and hold the wait tool, and
// choose the protocol versions; nil fields are not called.
type Hooks struct {
	// ProtocolVersions, when set, are the only protocol versions the server
	// negotiates (mcp.ServerOptions.SupportedProtocolVersions): the
	// gateway calls a server of a version before 2026-07-28 over stdio on
	// its own JSON-RPC, not through the SDK (see callDirect).
	ProtocolVersions []string
	SlowStarted      func()
	SlowCancelled    func()
	// Wait is called by the wait tool between its two progress reports.
	Wait func(ctx context.Context)
	// PollClosing and PollClosed are called by the poll tool just before
	// and just after it closes its stream.
	PollClosing func()
	PollClosed  func(ctx context.Context)
}

// TextArgs are the arguments of read and fail.
type TextArgs struct {
	Text string `json:"text"`
}

// TextOut is read's structured output.
type TextOut struct {
	Text string `json:"text"`
}

// ProgressArgs are the progress tool's arguments.
type ProgressArgs struct {
	Steps int `json:"steps"`
}

// PollArgs are the poll tool's arguments.
type PollArgs struct {
	// RetryMS is the reconnection delay, in milliseconds, the server asks
	// for as it closes the call's stream.
	RetryMS int `json:"retry_ms"`
}

func ptr[T any](v T) *T { return &v }

// New returns a server with the test tools:
//
//   - read: read-only; returns its text as text and structured content
//   - progress: reports steps progress notifications, then returns "done"
//     at once: the result follows the last report on the wire
//   - slow: reports one progress notification, then runs until cancelled
//   - wait: reports "waiting", calls Hooks.Wait, reports "released" and
//     returns "released"
//   - image: returns an image, audio and a resource link
//   - fail: returns an error result with its text
//   - poll: reports "polling", closes the call's SSE stream with the SSE
//     retry field set to retry_ms (streamable HTTP with an event store:
//     the client is to resume the stream with GET and Last-Event-ID after
//     that long; elsewhere it does nothing), and returns "resumed", which
//     reaches the client on the resumed stream
//   - drift: declares an output schema ({"count": integer}, required) and
//     answers {"count": "many"}, as real servers' answers drift from their
//     declarations
func New(h Hooks) *mcp.Server {
	var opts *mcp.ServerOptions
	if len(h.ProtocolVersions) > 0 {
		opts = &mcp.ServerOptions{SupportedProtocolVersions: h.ProtocolVersions}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "testserver", Version: "1"}, opts)
	mcp.AddTool(s, &mcp.Tool{
		Name: "read", Title: "Read", Description: "Returns the text.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in TextArgs) (*mcp.CallToolResult, TextOut, error) {
		return nil, TextOut(in), nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "progress", Description: "Reports progress.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ProgressArgs) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		for i := 1; i <= in.Steps && tok != nil; i++ {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: tok, Progress: float64(i), Total: float64(in.Steps), Message: "step"})
			if err != nil {
				return nil, nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "slow", Description: "Runs until cancelled.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)},
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if h.SlowStarted != nil {
			h.SlowStarted()
		}
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "started"})
		}
		select {
		case <-ctx.Done():
			if h.SlowCancelled != nil {
				h.SlowCancelled()
			}
			return nil, nil, ctx.Err()
		case <-time.After(time.Minute):
			return nil, nil, errors.New("never cancelled")
		}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "wait", Description: "Waits until released."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			report := func(msg string) error {
				if tok == nil {
					return nil
				}
				return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: msg})
			}
			if err := report("waiting"); err != nil {
				return nil, nil, err
			}
			if h.Wait != nil {
				h.Wait(ctx)
			}
			if err := report("released"); err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "poll", Description: "Closes its stream; the result comes on the resumed one."},
		func(ctx context.Context, req *mcp.CallToolRequest, in PollArgs) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "polling"}); err != nil {
					return nil, nil, err
				}
			}
			if h.PollClosing != nil {
				h.PollClosing()
			}
			if req.Extra != nil && req.Extra.CloseSSEStream != nil {
				req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: time.Duration(in.RetryMS) * time.Millisecond})
			}
			if h.PollClosed != nil {
				h.PollClosed(ctx)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "resumed"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "Returns an image."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.ImageContent{Data: PNG, MIMEType: "image/png"},
				&mcp.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
				&mcp.ResourceLink{URI: "file:///tmp/x.txt", Name: "x.txt"},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Fails."},
		func(_ context.Context, _ *mcp.CallToolRequest, in TextArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	s.AddTool(&mcp.Tool{
		Name: "drift", Description: "Answers what its output schema does not allow.",
		InputSchema:  map[string]any{"type": "object"},
		OutputSchema: map[string]any{"type": "object", "properties": map[string]any{"count": map[string]any{"type": "integer"}}, "required": []any{"count"}},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: `{"count":"many"}`}},
			StructuredContent: map[string]any{"count": "many"},
		}, nil
	})
	return s
}
