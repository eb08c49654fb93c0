package mcpsource

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/sources/mcpsource/internal/testserver"
)

// TestEndToEnd runs MCP tools through ExecuteBatch on a real toolwire server.
func TestEndToEnd(t *testing.T) {
	started, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := newHTTPServer(t, testserver.Hooks{
		SlowStarted:   func() { started <- struct{}{} },
		SlowCancelled: func() { cancelled <- struct{}{} },
	})
	g, reg := newGateway(t)
	c := loopback.Serve(t, reg, grpcserve.Config{}).Client
	if err := g.Sync(context.Background(), []ServerConfig{{Name: "m", URL: srv.URL}}); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitTools(t, reg, "the MCP tools", sourcetest.Has(prefixed("m", testTools...)...))
	ctx := context.Background()

	list, err := c.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.GetTools() {
		if tool.GetSource() != toolwirev1.ToolSource_TOOL_SOURCE_MCP {
			t.Errorf("%s: source %v", tool.GetName(), tool.GetSource())
		}
		if tool.GetName() == "m_read" && !tool.GetAnnotations().GetReadOnly() {
			t.Errorf("m_read is not read-only: %v", tool)
		}
	}

	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		client.Call("a", "m_read", `{"text":"x"}`),
		client.Call("b", "m_read", `{"text":"y"}`),
		client.Call("p", "m_progress", `{"steps":2}`),
		client.Call("i", "m_image", nil),
		client.Call("f", "m_fail", `{"text":"nope"}`),
	}}
	var progress []float64
	var events []*toolwirev1.ExecuteBatchResponse
	for ev, err := range c.ExecuteBatch(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
		if p := ev.GetProgress(); p != nil && p.GetCallId() == "p" {
			progress = append(progress, p.GetProgress())
		}
	}
	b, err := client.Collect(func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for _, ev := range events {
			if !yield(ev, nil) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	lanes := b.Accepted.GetLanes()
	if len(lanes) != 3 || !lanes[0].GetParallel() || !slices.Equal(lanes[0].GetCallIds(), []string{"a", "b", "p"}) {
		t.Errorf("lanes %v: want the read-only calls a, b, p sharing a parallel lane", lanes)
	}
	if !slices.Equal(progress, []float64{1, 2}) {
		t.Errorf("progress of p: %v, want [1 2]", progress)
	}
	r := b.Results
	if r[0].GetContent()[0].GetText().GetText() != `{"text":"x"}` || r[0].GetStructuredContent() != `{"text":"x"}` {
		t.Errorf("a: %v", r[0])
	}
	if img := r[3].GetContent()[0].GetImage(); !bytes.Equal(img.GetData(), testserver.PNG) || img.GetMimeType() != "image/png" {
		t.Errorf("i: %v", r[3])
	}
	if !r[4].GetIsError() || r[4].GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_TOOL_ERROR || r[4].GetContent()[0].GetText().GetText() != "nope" {
		t.Errorf("f: %v", r[4])
	}

	// Cancelling the RPC cancels the call on the MCP server.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		sourcetest.Wait(t, started, "the slow tool to start")
		cancel()
	}()
	for _, err := range c.ExecuteBatch(cctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("s", "m_slow", nil)}}) {
		if err != nil {
			break
		}
	}
	sourcetest.Wait(t, cancelled, "the MCP server's handler to see the cancellation")
}
