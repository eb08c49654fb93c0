package mcpserve

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// rawRequest is a hand-made request to /mcp: a client nobody wrote.
type rawRequest struct {
	method, body string
	header       map[string]string // "" deletes a default
	token        string
}

// rawResponse is what came back.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

func (ts *testServer) do(t *testing.T, q rawRequest) rawResponse {
	t.Helper()
	if q.method == "" {
		q.method = http.MethodPost
	}
	req, _ := http.NewRequest(q.method, ts.url, strings.NewReader(q.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range q.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	if q.token == "" {
		q.token = "alice-token"
	}
	resp, err := httpClient(t, q.token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResponse{resp.StatusCode, resp.Header, string(b)}
}

// openSession opens a 2025-11-25 session by hand and returns its ID.
func (ts *testServer) openSession(t *testing.T, token string) string {
	t.Helper()
	resp := ts.do(t, rawRequest{body: initializeBody, token: token})
	id := resp.header.Get("Mcp-Session-Id")
	if resp.status != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %s", resp.status, resp.body)
	}
	if r := ts.do(t, rawRequest{body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, token: token,
		header: map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": RevisionSessions}}); r.status != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", r.status, r.body)
	}
	return id
}

// rpcRefusal is a JSON-RPC error response.
type rpcRefusal struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// TestRefusalsSpeakJSONRPC: whatever /mcp refuses (a wrong Content-Type
// or Accept, a malformed or empty body, a session it does not have, a
// protocol version it does not speak, with or without a session, a
// request naming no session, a batched initialize, a method it does not
// serve) comes back as a JSON-RPC error answering the request's ID, with
// the HTTP status the transport's spec has for it; an unsupported version
// says "unsupported" and lists what is served.
func TestRefusalsSpeakJSONRPC(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	sid := ts.openSession(t, "alice-token")
	const list = `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
	withSession := func(h map[string]string) map[string]string {
		h["Mcp-Session-Id"] = sid
		if _, ok := h["Mcp-Protocol-Version"]; !ok {
			h["Mcp-Protocol-Version"] = RevisionSessions
		}
		return h
	}
	stateless := map[string]string{"Mcp-Protocol-Version": RevisionStateless}
	for _, c := range []struct {
		name    string
		req     rawRequest
		status  int
		code    int64
		id      string
		message string // a part of it
	}{
		{"wrong Content-Type", rawRequest{body: list, header: withSession(map[string]string{"Content-Type": "text/plain"})}, 415, jsonrpc.CodeInvalidRequest, "7", "Content-Type"},
		{"wrong Content-Type, stateless", rawRequest{body: list, header: map[string]string{"Content-Type": "text/plain", "Mcp-Protocol-Version": RevisionStateless}}, 415, jsonrpc.CodeInvalidRequest, "7", "Content-Type"},
		{"wrong Accept", rawRequest{body: list, header: withSession(map[string]string{"Accept": "application/json"})}, 400, jsonrpc.CodeInvalidRequest, "7", "Accept"},
		{"wrong Accept, stateless", rawRequest{body: list, header: map[string]string{"Accept": "text/html", "Mcp-Protocol-Version": RevisionStateless}}, 400, jsonrpc.CodeInvalidRequest, "7", "Accept"},
		{"malformed body", rawRequest{body: `{"jsonrpc":`, header: withSession(map[string]string{})}, 400, jsonrpc.CodeParseError, "null", "malformed"},
		{"malformed body, no session", rawRequest{body: `{"jsonrpc":`}, 400, jsonrpc.CodeParseError, "null", "malformed"},
		{"malformed body, stateless", rawRequest{body: `[{"jsonrpc":`, header: stateless}, 400, jsonrpc.CodeParseError, "null", "malformed"},
		{"empty body", rawRequest{body: ``, header: withSession(map[string]string{})}, 400, jsonrpc.CodeInvalidRequest, "null", "non-empty body"},
		{"unknown session", rawRequest{body: list, header: map[string]string{"Mcp-Session-Id": "no-such-session", "Mcp-Protocol-Version": RevisionSessions}}, 404, CodeSessionNotFound, "7", "open another with initialize"},
		{"unknown session, DELETE", rawRequest{method: http.MethodDelete, header: map[string]string{"Mcp-Session-Id": "no-such-session"}}, 404, CodeSessionNotFound, "null", "session not found"},
		{"another caller's session", rawRequest{body: list, token: "bob-token", header: withSession(map[string]string{})}, 403, CodePermissionDenied, "7", "another caller"},
		{"future version, session", rawRequest{body: list, header: withSession(map[string]string{"Mcp-Protocol-Version": "2099-01-01"})}, 400, mcp.CodeUnsupportedProtocolVersion, "7", `unsupported protocol version "2099-01-01"`},
		{"future version, no session", rawRequest{body: list, header: map[string]string{"Mcp-Protocol-Version": "2099-01-01"}}, 400, mcp.CodeUnsupportedProtocolVersion, "7", `unsupported protocol version "2099-01-01"`},
		{"garbage version", rawRequest{body: list, header: map[string]string{"Mcp-Protocol-Version": "banana"}}, 400, mcp.CodeUnsupportedProtocolVersion, "7", `unsupported protocol version "banana"`},
		{"old unknown version, session", rawRequest{body: list, header: withSession(map[string]string{"Mcp-Protocol-Version": "2024-01-01"})}, 400, mcp.CodeUnsupportedProtocolVersion, "7", `unsupported protocol version "2024-01-01"`},
		{"unsupported version, GET", rawRequest{method: http.MethodGet, header: withSession(map[string]string{"Mcp-Protocol-Version": "2099-01-01", "Accept": "text/event-stream"})}, 400, mcp.CodeUnsupportedProtocolVersion, "null", "unsupported"},
		{"no session", rawRequest{body: list, header: map[string]string{"Mcp-Protocol-Version": RevisionSessions}}, 400, jsonrpc.CodeInvalidRequest, "7", "names no session"},
		{"no session, stateless _meta", rawRequest{body: `{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`,
			header: map[string]string{"Mcp-Protocol-Version": RevisionSessions}}, 400, jsonrpc.CodeInvalidRequest, "8", "names no session"},
		{"session with stateless _meta", rawRequest{body: `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`,
			header: withSession(map[string]string{})}, 400, jsonrpc.CodeInvalidRequest, "9", "must not"},
		{"batched initialize, no version", rawRequest{body: "[" + initializeBody + "]"}, 400, jsonrpc.CodeInvalidRequest, "1", "batch"},
		{"batched initialize, 2025-03-26", rawRequest{body: "[" + initializeBody + `,{"jsonrpc":"2.0","id":2,"method":"ping"}]`, header: map[string]string{"Mcp-Protocol-Version": "2025-03-26"}}, 400, jsonrpc.CodeInvalidRequest, "1", "batch"},
		{"GET without a session", rawRequest{method: http.MethodGet, header: map[string]string{"Accept": "text/event-stream"}}, 400, jsonrpc.CodeInvalidRequest, "null", "Mcp-Session-Id"},
		{"PUT", rawRequest{method: http.MethodPut, body: list}, 405, jsonrpc.CodeInvalidRequest, "7", "PUT"},
		{"GET, stateless", rawRequest{method: http.MethodGet, header: map[string]string{"Mcp-Protocol-Version": RevisionStateless, "Accept": "text/event-stream"}}, 405, jsonrpc.CodeInvalidRequest, "null", "GET"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := ts.do(t, c.req)
			var got rpcRefusal
			if err := json.Unmarshal([]byte(resp.body), &got); err != nil || got.JSONRPC != "2.0" {
				t.Fatalf("%d %q: not a JSON-RPC error (%v)", resp.status, resp.body, err)
			}
			if resp.status != c.status || got.Error.Code != c.code || string(got.ID) != c.id || !strings.Contains(got.Error.Message, c.message) {
				t.Errorf("%d %s\nwant %d, code %d, id %s, a message with %q", resp.status, resp.body, c.status, c.code, c.id, c.message)
			}
			if ct := resp.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if resp.header.Get("Mcp-Session-Id") != "" {
				t.Errorf("a refusal opened session %s", resp.header.Get("Mcp-Session-Id"))
			}
			if c.code == mcp.CodeUnsupportedProtocolVersion {
				var data mcp.UnsupportedProtocolVersionData
				if err := json.Unmarshal(got.Error.Data, &data); err != nil || !slices.Contains(data.Supported, RevisionSessions) ||
					!slices.Contains(data.Supported, RevisionStateless) || data.Requested == "" {
					t.Errorf("data %s: want the supported versions and the one requested", got.Error.Data)
				}
			} else if strings.Contains(strings.ToLower(got.Error.Message), "not supported") {
				t.Errorf("%q: a refusal that is not about the version says it is", got.Error.Message)
			}
		})
	}
	// The session the refusals named still works, and no refusal opened one.
	if r := ts.do(t, rawRequest{body: list, header: withSession(map[string]string{})}); r.status != http.StatusOK || !strings.Contains(r.body, `"echo"`) {
		t.Errorf("the session after the refusals: %d %s", r.status, r.body)
	}
	if open, _ := ts.mcp.sessions.count(); open != 1 {
		t.Errorf("%d sessions open after the refusals, want the one", open)
	}
}

// TestRefusalReadByClient: the go-sdk's client reads a refusal as the
// JSON-RPC error it is (here: a session this server closed), not as an
// HTTP status.
func TestRefusalReadByClient(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: ts.url, HTTPClient: httpClient(t, "alice-token"), MaxRetries: -1, DisableStandaloneSSE: true},
		&mcp.ClientSessionOptions{ProtocolVersion: RevisionSessions})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for ss := range ts.mcp.sdk.Sessions() {
		_ = ss.Close()
	}
	_, err = cs.ListTools(t.Context(), nil)
	if !isRPC(err, CodeSessionNotFound) || !strings.Contains(err.Error(), "initialize") {
		t.Errorf("a request of a closed session: %v; want a JSON-RPC error %d", err, CodeSessionNotFound)
	}
}

// TestInitializeErrorsHaveCodes: an initialize the SDK would answer with
// an error of code 0 (a second one on a session; params missing, null, or
// of the wrong shape, for which it also sent an Mcp-Session-Id it then
// closed) gets a JSON-RPC error a client can act on, and opens nothing.
func TestInitializeErrorsHaveCodes(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	c := newRawClient(t, ts.url, "alice-token", RevisionSessions)
	resp := c.post(initializeBody, nil)
	body := readAll(t, resp)
	if !strings.Contains(string(body), `"code":-32600`) || !strings.Contains(string(body), "initialized already") {
		t.Errorf("a second initialize on a session: %s\n%s", resp.Status, body)
	}
	for _, params := range []string{`,"params":null`, `,"params":[1]`, `,"params":{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}`, `,"params":{"protocolVersion":"2025-11-25","capabilities":"all"}`} {
		r := ts.do(t, rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"initialize"` + params + `}`})
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `"code":-32602`) || r.header.Get("Mcp-Session-Id") != "" {
			t.Errorf("initialize%s: %d, session %q\n%s", params, r.status, r.header.Get("Mcp-Session-Id"), r.body)
		}
	}
	if n, _ := ts.mcp.sessions.count(); n != 1 {
		t.Errorf("%d sessions open, want the one", n)
	}
}
