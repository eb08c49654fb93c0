package mcpserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// rawClient speaks /mcp's JSON-RPC over plain HTTP, for tests that look
// at what the SDKs' clients hide: HTTP statuses, SSE fields, codes the
// clients turn into their own errors.
type rawClient struct {
	t       testing.TB
	url     string
	http    *http.Client
	rev     string
	session string // 2025-11-25: the Mcp-Session-Id initialize gave
}

// newRawClient opens a client at rev: on 2025-11-25 it initializes a
// session first.
func newRawClient(t testing.TB, url, token, rev string) *rawClient {
	t.Helper()
	c := &rawClient{t: t, url: url, http: httpClient(t, token), rev: rev}
	if rev < RevisionStateless {
		resp := c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+rev+`","capabilities":{},"clientInfo":{"name":"raw","version":"v0"}}}`, nil)
		body := readAll(t, resp)
		c.session = resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || c.session == "" {
			t.Fatalf("initialize: %s, session %q\n%s", resp.Status, c.session, body)
		}
		resp = c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
		if body := readAll(t, resp); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("notifications/initialized: %s\n%s", resp.Status, body)
		}
		t.Cleanup(func() {
			req, _ := http.NewRequest(http.MethodDelete, url, nil)
			req.Header.Set("Mcp-Session-Id", c.session)
			req.Header.Set("Mcp-Protocol-Version", rev)
			if resp, err := c.http.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	return c
}

// request builds a JSON-RPC request of method with params (a JSON object
// or ""), adding 2026-07-28's _meta.
func (c *rawClient) request(id int, method, params string) string {
	p := map[string]any{}
	if params != "" {
		if err := json.Unmarshal([]byte(params), &p); err != nil {
			c.t.Fatal(err)
		}
	}
	if c.rev >= RevisionStateless {
		p["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    c.rev,
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "v0"},
		}
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": p})
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

// post sends body with the revision's and session's headers (and the
// extra ones in h) and returns the response, its body unread.
func (c *rawClient) post(body string, h http.Header) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", c.rev)
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// rpcResponse is a JSON-RPC response.
type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call sends a request and returns its HTTP status and its response (the
// body, or the response among the SSE stream's messages).
func (c *rawClient) call(id int, method, params string) (int, rpcResponse) {
	c.t.Helper()
	var h http.Header
	if c.rev >= RevisionStateless {
		// SEP-2243's standard headers: the method, and what it names.
		h = http.Header{"Mcp-Method": {method}}
		var named struct{ Name, URI string }
		_ = json.Unmarshal([]byte(params), &named)
		if n := named.Name + named.URI; n != "" {
			h.Set("Mcp-Name", n)
		}
	}
	resp := c.post(c.request(id, method, params), h)
	body := readAll(c.t, resp)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, ev := range sseEvents(body) {
			var r rpcResponse
			if json.Unmarshal([]byte(ev.data), &r) == nil && (r.Result != nil || r.Error != nil) {
				return resp.StatusCode, r
			}
		}
		c.t.Fatalf("%s: no response in the stream\n%s", method, body)
	}
	var r rpcResponse
	if err := json.Unmarshal(body, &r); err != nil {
		c.t.Fatalf("%s: %s, not a JSON-RPC response: %v\n%s", method, resp.Status, err, body)
	}
	return resp.StatusCode, r
}

func readAll(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sseEvent is one server-sent event's fields.
type sseEvent struct {
	name, id, retry, data string
	hasData               bool
}

// sseEvents parses an SSE body into its events (comments dropped).
func sseEvents(body []byte) []sseEvent {
	var out []sseEvent
	var ev sseEvent
	fields := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if fields {
				out = append(out, ev)
			}
			ev, fields = sseEvent{}, false
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "":
			continue // a comment
		case "event":
			ev.name = v
		case "id":
			ev.id = v
		case "retry":
			ev.retry = v
		case "data":
			if ev.hasData {
				ev.data += "\n"
			}
			ev.data += v
			ev.hasData = true
		}
		fields = true
	}
	if fields {
		out = append(out, ev)
	}
	return out
}
