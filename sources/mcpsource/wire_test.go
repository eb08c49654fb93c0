package mcpsource

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/toolwire/toolwire/tools"
)

// TestWireBody: the messages of an HTTP response body are observed however
// the body is cut into reads, for SSE (CRLF or LF lines, data split over
// lines, other events and comments between; events named other than
// "message" skipped, as the SDK skips them) and for a JSON body.
func TestWireBody(t *testing.T) {
	t.Parallel()
	progress := func(n int) string {
		return `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":` + string(rune('0'+n)) + `}}`
	}
	for _, tc := range []struct {
		name, contentType, body string
		want                    []float64
	}{
		{"sse", "text/event-stream", "id: 1\ndata: " + progress(1) + "\n\n: a comment\nevent: message\ndata:" + progress(2) + "\n\n", []float64{1, 2}},
		{"sse crlf", "text/event-stream; charset=utf-8", "data: " + progress(1) + "\r\n\r\ndata: " + progress(2) + "\r\n\r\n", []float64{1, 2}},
		{"sse data over two lines", "text/event-stream", "data: " + progress(1)[:17] + "\ndata: " + progress(1)[17:] + "\n\n", []float64{1}},
		{"sse events of another name", "text/event-stream", "event: ping\ndata: " + progress(1) + "\n\nevent: " + sseDropped + "\ndata: " + progress(2) + "\n\nevent: x\nevent: message\ndata: " + progress(3) + "\n\n", []float64{3}},
		{"sse unterminated event", "text/event-stream", "data: " + progress(1) + "\n\ndata: " + progress(2) + "\n", []float64{1}},
		{"json", "application/json", progress(3), []float64{3}},
		{"other content", "text/plain", progress(4), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []float64
			call := tools.NewCall("c", "t", json.RawMessage(`{}`), func(p tools.Progress) { got = append(got, *p.Progress) })
			fwd := &forwarder{call: call}
			s := &server{calls: map[string]*forwarder{"tok": fwd}, taskRequired: map[string]bool{}, log: slog.New(slog.DiscardHandler)}
			resp := &http.Response{StatusCode: http.StatusOK, ContentLength: -1, Header: http.Header{"Content-Type": {tc.contentType}},
				Body: io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body)))}
			// As RoundTrip has it: bounded (an SSE stream's events are
			// observed by its bound), then observed.
			hs := &httpSession{s: s}
			hs.bound(resp)
			s.observeBody(resp, hs)
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != tc.body {
				t.Fatalf("the SDK reads %q, %v; want the body unchanged", b, err)
			}
			fwd.finish(context.Background())
			if !slices.Equal(got, tc.want) {
				t.Errorf("progress %v, want %v", got, tc.want)
			}
		})
	}
}
