package mcpserve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func TestExactInteger(t *testing.T) {
	t.Parallel()
	for n, want := range map[string]bool{
		"0": true, "-0": true, "7": true, "1e3": true, "1.0": true, "1.000000000000000000000": true,
		"9007199254740992": true, "-9007199254740992": true, "4.5e15": true, "90071992547409.92e2": false,
		"9007199254740993": false, "-9007199254740993": false, "1.5": false, "0.1": false,
		"1.2e22": false, "12345678901234567890123": false, "1e-400": false, "4503599627370495.5": false,
		"1e400": false, "9007199254740992.5": false,
	} {
		if _, got := exactInteger(n); got != want {
			t.Errorf("exactInteger(%s) = %v, want %v", n, got, want)
		}
	}
}

// Numbers that name a request or a token are refused unless the SDK
// answers with them as sent, and a batch's requests need IDs of their
// own: before, the SDK answered 9007199254740993 as 9007199254740992 and
// 1.5 as 1 (the client never matched its answer), and of two tools/calls
// of ID 7 in a batch both ran and one result was dropped.
func TestIDsAnsweredAsSent(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	sessions := newRawClient(t, ts.url, "alice-token", RevisionSessions)
	batches := newRawClient(t, ts.url, "alice-token", "2025-03-26")
	stateless := newRawClient(t, ts.url, "alice-token", RevisionStateless)
	echo := func(id, text string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + text + `"}}}`
	}
	for _, tc := range []struct {
		name   string
		c      *rawClient
		body   string
		header http.Header
		code   int64
		id     string // the ID the refusal answers
	}{
		{"id over 2^53", sessions, `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, nil, jsonrpc.CodeInvalidRequest, "null"},
		{"id with a fraction", sessions, echo("1.5", "hi"), nil, jsonrpc.CodeInvalidRequest, "null"},
		{"id past int64", sessions, `{"jsonrpc":"2.0","id":1.2e22,"method":"ping"}`, nil, jsonrpc.CodeInvalidRequest, "null"},
		{"stateless id with a fraction", stateless, strings.Replace(stateless.request(0, "tools/call", `{"name":"echo","arguments":{"text":"hi"}}`), `"id":0`, `"id":2.5`, 1),
			http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"echo"}}, jsonrpc.CodeInvalidRequest, "null"},
		{"progress token over 2^53", sessions, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":9007199254740993}}}`, nil, jsonrpc.CodeInvalidParams, "3"},
		{"stateless progress token over 2^53", stateless, strings.Replace(stateless.request(4, "tools/call", `{"name":"echo","arguments":{"text":"hi"}}`), `"_meta":{`, `"_meta":{"progressToken":9007199254740993,`, 1),
			http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"echo"}}, jsonrpc.CodeInvalidParams, "4"},
		{"cancelled naming a rounded ID", sessions, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1.5}}`, nil, jsonrpc.CodeInvalidParams, "null"},
		{"one ID twice in a batch", batches, "[" + echo("7", "first") + "," + echo("7", "second") + "]", nil, jsonrpc.CodeInvalidRequest, "7"},
		{"IDs equal as numbers in a batch", batches, "[" + echo("8", "first") + "," + echo("8.0", "second") + "]", nil, jsonrpc.CodeInvalidRequest, "8.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.c.post(tc.body, tc.header)
			body := readAll(t, resp)
			var r rpcResponse
			if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != http.StatusBadRequest || r.Error == nil {
				t.Fatalf("got %s, want 400 and a JSON-RPC error\n%s", resp.Status, body)
			}
			if r.Error.Code != tc.code || string(r.ID) != tc.id {
				t.Errorf("got error %d answering %s (%s), want %d answering %s", r.Error.Code, r.ID, r.Error.Message, tc.code, tc.id)
			}
		})
	}
	// What is answered as sent still is.
	for _, id := range []string{`"x"`, `9007199254740992`, `-3`} {
		resp := sessions.post(`{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`, nil)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`"id":%s,"result"`, id)) {
			t.Errorf("ping of id %s: %s\n%s", id, resp.Status, body)
		}
	}
	resp := batches.post("["+echo("1", "a")+","+echo(`"1"`, "b")+"]", nil)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || strings.Count(string(body), `"result"`) != 2 {
		t.Errorf("a batch of IDs 1 and \"1\": %s, want both results\n%s", resp.Status, body)
	}
}
