package mcpserve

import (
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestAwaitResultKeepsHandedOffResult: a tools/call whose request ended
// before its result (a 2025-11-25 stream cut mid-call, the client to
// resume with Last-Event-ID) has its Send hand the result off without
// waiting for a response to be written, so the batch can end before the
// handler waits: both the result and the end are ready. The result is
// returned, every time; the end's error only when no result came. (The
// handler used to select between the two, and so answered "the call ended
// without a result" about half the time, losing the result the resumed
// stream was owed: TestResumeCutStream/result_while_cut failed 4 times in
// 900 runs under load, each time so.)
func TestAwaitResultKeepsHandedOffResult(t *testing.T) {
	t.Parallel()
	for _, end := range []error{nil, errors.New("a Send failed after the result")} {
		for i := range 1000 {
			handoff := make(chan *mcp.CallToolResult, 1)
			ended := make(chan error, 1)
			want := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}
			handoff <- want
			ended <- end
			if res, err := awaitResult(handoff, ended); res != want || err != nil {
				t.Fatalf("attempt %d, the batch ended with %v after handing off its result: got %v, %v; want the result", i, end, res, err)
			}
		}
	}

	// No result handed off: the end says why.
	ended := make(chan error, 1)
	ended <- nil
	res, err := awaitResult(make(chan *mcp.CallToolResult, 1), ended)
	var je *jsonrpc.Error
	if res != nil || !errors.As(err, &je) || je.Code != jsonrpc.CodeInternalError {
		t.Errorf("a batch that ended without a result: %v, %v; want an internal error", res, err)
	}
}
