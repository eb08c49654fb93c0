package connectserve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/surfacetest"
	"github.com/toolwire/toolwire/internal/testing/logbuf"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// These tests call the port as curl and a browser's fetch do: raw HTTP,
// JSON bodies, no generated client.

const token = "alice-token-0123456789"

// curlBody is the README's curl line's body.
const curlBody = `{"call":{"callId":"1","name":"echo","arguments":"{\"text\":\"hi\"}"}}`

// newPort serves the Connect surface of an engine with the diag tools and
// extra on a port configured by hc, with one caller, alice (token), and
// returns its URL.
func newPort(t *testing.T, hc httpserve.Config, extra ...tools.Tool) string {
	t.Helper()
	reg, err := tools.NewRegistry(append(diag.Tools(), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{DrainTimeout: time.Second}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close) // registered first, so it runs after the port has stopped
	return serveSurface(t, eng, reg, []surfacetest.Caller{{Name: "alice", Token: token}}, hc)
}

// post sends body to url+path with contentType and alice's token (unless
// anonymous) and returns the status, the response's headers and its body.
func post(t *testing.T, url, path, contentType string, body io.Reader, anonymous bool) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if !anonymous {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// connectError is a Connect error body.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func decodeError(t *testing.T, body string) connectError {
	t.Helper()
	var e connectError
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Errorf("error body %q is not a Connect error: %v", body, err)
	}
	return e
}

// callEcho is the curl line, checked: a normal call from another client.
func callEcho(t *testing.T, url string) {
	t.Helper()
	status, h, body := post(t, url, "/toolwire.v1.ToolService/CallTool", "application/json", strings.NewReader(curlBody), false)
	var got struct {
		Result struct {
			CallID   string `json:"callId"`
			ToolName string `json:"toolName"`
			Content  []struct {
				Text struct{ Text string } `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || status != http.StatusOK {
		t.Fatalf("CallTool: %d %q: %v", status, body, err)
	}
	r := got.Result
	if r.CallID != "1" || r.ToolName != "echo" || len(r.Content) != 1 || r.Content[0].Text.Text != "hi" || r.IsError {
		t.Errorf("CallTool: %s; want echo's result for call 1, text hi", body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("CallTool's Content-Type %q, want application/json", ct)
	}
}

// TestCurlCallTool: the README's curl line (CallTool with a JSON body)
// gets echo's result as JSON.
func TestCurlCallTool(t *testing.T) {
	t.Parallel()
	callEcho(t, newPort(t, httpserve.Config{}))
}

// TestUnauthenticated: without a token, or with a wrong one, every
// procedure answers 401 with a Bearer challenge and a Connect error body,
// and never a tool list.
func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	url := newPort(t, httpserve.Config{})
	for _, auth := range []string{"", "Bearer wrong-token-0123456789"} {
		for _, path := range []string{"ListTools", "CallTool", "ExecuteBatch"} {
			ct, body := "application/json", `{}`
			if path == "ExecuteBatch" {
				ct, body = "application/connect+json", string(envelope(0, []byte(`{"calls":[]}`)))
			}
			req, _ := http.NewRequest(http.MethodPost, url+"/toolwire.v1.ToolService/"+path, strings.NewReader(body))
			req.Header.Set("Content-Type", ct)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			e := decodeError(t, string(b))
			if resp.StatusCode != http.StatusUnauthorized || e.Code != "unauthenticated" || e.Message == "" ||
				!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") || strings.Contains(string(b), "echo") {
				t.Errorf("%s with %q: %d %q %q; want 401, a Bearer challenge and an unauthenticated error, no tools",
					path, auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
			}
		}
	}
	callEcho(t, url)
}

// envelope frames msg as the Connect streaming protocol does: a flags
// byte, its length (big-endian uint32), then msg.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// readEnvelope reads one envelope from r.
func readEnvelope(r *bufio.Reader) (flags byte, msg []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	msg = make([]byte, binary.BigEndian.Uint32(head[1:]))
	_, err = io.ReadFull(r, msg)
	return head[0], msg, err
}

// TestCurlExecuteBatchStreams: ExecuteBatch with the Connect protocol's
// JSON envelopes (application/connect+json), as a fetch can send it,
// streams its events as they happen: echo's result arrives while another
// call of the batch still runs, and the end-of-stream envelope comes last
// with no error.
func TestCurlExecuteBatchStreams(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	gate := tools.Tool{Name: "gate", Description: "waits for the test", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			select {
			case <-release:
				return tools.Text("released"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}
	url := newPort(t, httpserve.Config{}, gate)
	batch := `{"calls":[{"callId":"g","name":"gate","arguments":"{}"},{"callId":"e","name":"echo","arguments":"{\"text\":\"streamed\"}"}]}`
	req, _ := http.NewRequest(http.MethodPost, url+"/toolwire.v1.ToolService/ExecuteBatch", bytes.NewReader(envelope(0, []byte(batch))))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("ExecuteBatch: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	var events []string
	for {
		flags, msg, err := readEnvelope(r)
		if err != nil {
			t.Fatalf("after %q: %v", events, err)
		}
		if flags&0x02 != 0 { // end of stream
			if strings.TrimSpace(string(msg)) != "{}" {
				t.Errorf("end of stream %s; want {} (no error)", msg)
			}
			break
		}
		events = append(events, string(msg))
		if strings.Contains(string(msg), `"streamed"`) {
			// The gate is still shut: this result was streamed, not
			// held back for the batch's end.
			close(release)
		}
	}
	if _, _, err := readEnvelope(r); err != io.EOF {
		t.Errorf("after the end of stream: %v, want EOF", err)
	}
	joined := strings.Join(events, "\n")
	for _, want := range []string{`"accepted"`, `"streamed"`, `"released"`, `"finished"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("events lack %s:\n%s", want, joined)
		}
	}
	if !strings.Contains(events[0], `"accepted"`) || !strings.Contains(events[len(events)-1], `"finished"`) {
		t.Errorf("events not from accepted to finished:\n%s", joined)
	}
}

// TestBadInput: on the port, each of malformed JSON, a content type no
// protocol has, a 10 MB body (declared or chunked) and a body too slow to
// arrive gets a clear error of its own, and a normal call from another
// client meanwhile succeeds.
func TestBadInput(t *testing.T) {
	t.Parallel()
	url := newPort(t, httpserve.Config{})
	const callTool = "/toolwire.v1.ToolService/CallTool"
	big := `{"call":{"callId":"1","name":"echo","arguments":"{\"text\":\"` + strings.Repeat("x", 10<<20) + `\"}"}}`
	tests := []struct {
		name        string
		contentType string
		body        func() io.Reader
		status      int
		code        string
		message     string
	}{
		{"malformed JSON", "application/json", func() io.Reader { return strings.NewReader(`{"call":{"callId":`) },
			http.StatusBadRequest, "invalid_argument", "unmarshal"},
		{"a misspelt field", "application/json", func() io.Reader { return strings.NewReader(`{"cal":{}}`) },
			http.StatusBadRequest, "invalid_argument", "the request has no call"},
		{"a 10 MB body", "application/json", func() io.Reader { return strings.NewReader(big) },
			http.StatusRequestEntityTooLarge, "resource_exhausted", "http_max_body_bytes"},
		// Found too large only as Connect reads it: the port's 413 all the
		// same, not Connect's 429, which invites a retry.
		{"a 10 MB chunked body", "application/json", func() io.Reader { return io.MultiReader(strings.NewReader(big)) },
			http.StatusRequestEntityTooLarge, "resource_exhausted", "http_max_body_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var wg sync.WaitGroup
			wg.Go(func() { callEcho(t, url) })
			status, _, body := post(t, url, callTool, tc.contentType, tc.body(), false)
			wg.Wait()
			if e := decodeError(t, body); status != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.message) {
				t.Errorf("%d %.300q; want %d, %s, a message with %q", status, body, tc.status, tc.code, tc.message)
			}
		})
	}
	t.Run("wrong content type", func(t *testing.T) {
		t.Parallel()
		var wg sync.WaitGroup
		wg.Go(func() { callEcho(t, url) })
		status, h, body := post(t, url, callTool, "text/plain", strings.NewReader(curlBody), false)
		wg.Wait()
		if status != http.StatusUnsupportedMediaType || !strings.Contains(h.Get("Accept-Post"), "application/json") {
			t.Errorf("text/plain: %d, Accept-Post %q, %q; want 415 naming what the port takes", status, h.Get("Accept-Post"), body)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		t.Parallel()
		url := newPort(t, httpserve.Config{ReadTimeout: 500 * time.Millisecond})
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "POST "+callTool+" HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer "+token+
			"\r\nContent-Length: 100\r\n\r\n"+curlBody[:10])
		callEcho(t, url)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("the slow body: no answer after %v: %v", time.Since(start), err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The port's read timeout ends the body's read, which Connect
		// reports as a deadline passed.
		if e := decodeError(t, string(b)); resp.StatusCode != http.StatusGatewayTimeout || e.Code != "deadline_exceeded" || !strings.Contains(e.Message, "timeout") {
			t.Errorf("the slow body: %s %q; want 504 deadline_exceeded, at the read timeout", resp.Status, b)
		}
		callEcho(t, url)
	})
}

// TestStuckStreamIsEnded: a client that opens ExecuteBatch and reads
// nothing holds the server's write once the window or the socket's
// buffers are full; after the engine's SendTimeout the surface's Stopper
// ends that write, so the batch ends (its calls cancelled) while the
// client still holds the connection, over HTTP/1.1 and over h2c alike, and
// other callers are served meanwhile.
func TestStuckStreamIsEnded(t *testing.T) {
	t.Parallel()
	blob := tools.Tool{Name: "blob", Description: "returns 64 KiB", Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(context.Context, *tools.Call) (*tools.Result, error) {
			return tools.Text(strings.Repeat("x", 64<<10)), nil
		}}
	var calls []string
	for i := range 400 { // 25 MiB of results: more than HTTP/2's window and the sockets' buffers
		calls = append(calls, `{"callId":"`+strconv.Itoa(i)+`","name":"blob"}`)
	}
	body := envelope(0, []byte(`{"calls":[`+strings.Join(calls, ",")+`]}`))
	for _, h2c := range []bool{false, true} {
		name := "HTTP/1.1"
		if h2c {
			name = "h2c"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg, err := tools.NewRegistry(append(diag.Tools(), blob)...)
			if err != nil {
				t.Fatal(err)
			}
			log := &logbuf.Buffer{}
			eng := engine.New(engine.Config{SendTimeout: 300 * time.Millisecond, DrainTimeout: time.Second}, engine.Deps{Logger: slog.New(slog.NewTextHandler(log, nil))})
			t.Cleanup(eng.Close)
			url := serveSurface(t, eng, reg, []surfacetest.Caller{{Name: "alice", Token: token}}, httpserve.Config{})
			if h2c {
				req, _ := http.NewRequest(http.MethodPost, url+"/toolwire.v1.ToolService/ExecuteBatch", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/connect+json")
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := httpClient(t, true).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close() // read nothing until the end
			} else {
				conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10) // a small window: the server's writes stop soon
				_, err = io.WriteString(conn, "POST /toolwire.v1.ToolService/ExecuteBatch HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/connect+json\r\n"+
					"Authorization: Bearer "+token+"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+string(body))
				if err != nil {
					t.Fatal(err)
				}
			}
			// The batch starts, then its writes stop; the engine ends it.
			deadline := time.Now().Add(20 * time.Second)
			for eng.Stats().Batches == 0 && !strings.Contains(log.String(), "ending its stream") {
				if time.Now().After(deadline) {
					t.Fatalf("the batch never ran; log:\n%s", log)
				}
				time.Sleep(5 * time.Millisecond)
			}
			callEcho(t, url)
			for eng.Stats().Batches != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := eng.Stats().Batches; n != 0 {
				t.Fatalf("%d batches still running with their client not reading; log:\n%s", n, log)
			}
			if l := log.String(); !strings.Contains(l, "ending its stream") || strings.Contains(l, "cannot be ended") {
				t.Errorf("the engine's log does not say it ended the stream:\n%s", l)
			}
			callEcho(t, url)
		})
	}
}
