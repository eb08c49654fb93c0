package grpcserve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/store/memory"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawHTTP serves each request with the answer for its path, written as
// is: what a broken upstream sends, past what net/http would write.
func rawHTTP(tb testing.TB, answers map[string]string, hits *atomic.Int32) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				hits.Add(1)
				_, _ = c.Write([]byte(answers[req.URL.Path]))
			}()
		}
	}()
	return "http://" + lis.Addr().String()
}

// TestUpstreamBytesThatAreNotUTF8 runs calls whose upstreams answer with
// bytes that are not UTF-8 (an HTTP status line, a JSON body, a tool's
// text, structured content, details and progress, a tool's description),
// over a real socket: protocol buffers' strings must be UTF-8, and one that
// was not failed the marshal of its event, ending the stream of every call
// in the batch (the healthy call's result and BatchFinished never came) and
// leaving the result's idempotency record unwritten, so a retry with the
// same key waited for its deadline. Each now arrives with U+FFFD in place of
// the bytes, the batch finishes, ListTools lists, and a keyed retry replays
// the recorded result without calling the upstream again.
func TestUpstreamBytesThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	const body = "{\"id\":4,\"n\":\"Cr\xe9\xe9\"}"
	up := rawHTTP(t, map[string]string{
		"/status": "HTTP/1.1 500 Bad \xff\xfe\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno",
		"/body":   fmt.Sprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body),
	}, &hits)
	hc := httpsource.NewClient()
	t.Cleanup(hc.CloseIdleConnections)
	web, err := httpsource.Tools([]httpsource.Spec{
		{Name: "bad_status", Description: "A status line that is not UTF-8.", URL: up + "/status", ReadOnly: true},
		{Name: "bad_body", Description: "Creates: a body that is not UTF-8.", URL: up + "/body", Method: http.MethodPost},
	}, hc)
	if err != nil {
		t.Fatal(err)
	}
	mangle := tools.Tool{
		Name: "mangle", Description: "Describes itself in Latin-1: caf\xe9.",
		Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(_ context.Context, c *tools.Call) (*tools.Result, error) {
			c.Report(tools.Progress{Message: "half \xff", Output: "out \xfe"})
			return &tools.Result{Content: []tools.Content{{Text: "a\xffb"}, {Data: []byte{1}, MIMEType: "image/\xff"}},
				StructuredContent: json.RawMessage("{\"s\":\"\xfe\"}"), Details: json.RawMessage("{\"d\":\"\xff\"}")}, nil
		},
	}
	reg, err := tools.NewRegistry(append(append(diag.Tools(), web...), mangle)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := newSurface(t, reg, engine.Config{}, engine.Deps{Idempotency: memory.New(memory.Options{})})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() { stop(); <-served })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := toolwirev1.NewToolServiceClient(conn)

	batch := func() []*toolwirev1.ExecuteBatchResponse {
		t.Helper()
		stream, err := c.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
			call("status", "bad_status", `{}`), call("mangle", "mangle", `{}`), call("echo", "echo", `{"text":"fine"}`),
			{CallId: "body", Name: "bad_body", Arguments: `{}`, IdempotencyKey: "create-4"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		events, err := drain(stream)
		if err != nil {
			t.Fatalf("the batch's stream ended with %v after %d events", err, len(events))
		}
		return events
	}
	events := batch()
	if events[len(events)-1].GetFinished() == nil {
		t.Error("no BatchFinished")
	}
	res := results(t, events)
	for id, want := range map[string]string{"status": "Bad \ufffd", "mangle": "a\ufffdb", "echo": "fine", "body": "Cr\ufffd"} {
		if got := text(res[id]); !strings.Contains(got, want) {
			t.Errorf("%s: %q; want it to say %q", id, got, want)
		}
	}
	m := res["mangle"]
	if m.GetStructuredContent() != "{\"s\":\"\ufffd\"}" || m.GetDetails() != "{\"d\":\"\ufffd\"}" || m.GetContent()[1].GetImage().GetMimeType() != "image/\ufffd" {
		t.Errorf("mangle's structured content %q, details %q, image type %q", m.GetStructuredContent(), m.GetDetails(), m.GetContent()[1].GetImage().GetMimeType())
	}
	var progressed bool
	for _, ev := range events {
		if p := ev.GetProgress(); p != nil {
			progressed = p.GetMessage() == "half \ufffd" && p.GetOutput() == "out \ufffd"
		}
	}
	if !progressed {
		t.Error("no progress event with the message and output mended")
	}

	again := results(t, batch())["body"]
	if hits.Load() != 2+1 || !again.GetReplayed() || text(again) != text(res["body"]) {
		t.Errorf("the keyed retry: replayed %v, %q; upstream hits %d, want 3 (each bad_status, one bad_body)", again.GetReplayed(), text(again), hits.Load())
	}

	list, err := c.ListTools(ctx, &toolwirev1.ListToolsRequest{})
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	for _, tool := range list.GetTools() {
		if !utf8.ValidString(tool.GetDescription()) {
			t.Errorf("%s's description is not UTF-8", tool.GetName())
		}
		if tool.GetName() == "mangle" && tool.GetDescription() != "Describes itself in Latin-1: caf\ufffd." {
			t.Errorf("mangle's description: %q", tool.GetDescription())
		}
	}
}
