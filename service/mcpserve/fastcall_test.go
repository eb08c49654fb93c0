package mcpserve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestFastCallAnswersAsTheSDK sends the same stateless tools/call requests
// to two servers, one answering plainly valid calls on its fast path
// (fastcall.go) and one leaving every request to the go-sdk, and wants the
// same status, headers and bytes back; and wants the fast path to have
// answered exactly the requests it is for, the rest (which the SDK
// refuses or treats otherwise) reaching the SDK whole.
func TestFastCallAnswersAsTheSDK(t *testing.T) {
	fast := newTestServer(t, nil)
	sdk := newTestServer(t, nil)
	sdk.mcp.sdkOnly = true
	meta := func(extra string) string {
		return `{"io.modelcontextprotocol/protocolVersion":"` + RevisionStateless + `","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"v0"}` + extra + `}`
	}
	call := func(id, name, args, meta string) string {
		p := `{"name":"` + name + `"`
		if args != "" {
			p += `,"arguments":` + args
		}
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + p + `,"_meta":` + meta + `}}`
	}
	tests := []struct {
		name   string
		body   string
		header http.Header // beyond the revision's; Mcp-Method and Mcp-Name default to tools/call and echo
		fast   bool
		token  string // default alice's
	}{
		{"echo", call("1", "echo", `{"text":"hi"}`, meta("")), nil, true, ""},
		{"string ID", call(`"abc"`, "echo", `{"text":"hi"}`, meta("")), nil, true, ""},
		{"progress", call("2", "count", `{}`, meta(`,"progressToken":"p1"`)), http.Header{"Mcp-Name": {"count"}}, true, ""},
		{"numeric progress token", call("3", "count", `{}`, meta(`,"progressToken":7`)), http.Header{"Mcp-Name": {"count"}}, true, ""},
		{"unknown tool", call("4", "nope", `{}`, meta("")), http.Header{"Mcp-Name": {"nope"}}, true, ""},
		{"invalid arguments", call("5", "echo", `{"text":5}`, meta("")), nil, true, ""},
		{"no arguments", call("6", "echo", "", meta("")), nil, true, ""},
		{"null arguments", call("7", "echo", "null", meta("")), nil, true, ""},
		{"toolwire's keys", call("8", "echo", `{"text":"hi"}`, meta(`,"`+MetaSessionID+`":"s1","`+MetaCallID+`":"c-1","`+MetaIdempotencyKey+`":"k1"`)), nil, true, ""},
		{"image", call("9", "image", `{}`, meta("")), http.Header{"Mcp-Name": {"image"}}, true, ""},
		{"the caller's identity", call("11", "identity", `{}`, meta("")), http.Header{"Mcp-Name": {"identity"}}, true, ""},
		{"not permitted", call("12", "secret", `{}`, meta("")), http.Header{"Mcp-Name": {"secret"}}, true, "bob-token"},
		{"no client info", call("10", "echo", `{"text":"hi"}`, `{"io.modelcontextprotocol/protocolVersion":"`+RevisionStateless+`","io.modelcontextprotocol/clientCapabilities":{}}`), nil, true, ""},

		{"no Mcp-Name", call("20", "echo", `{"text":"hi"}`, meta("")), http.Header{"Mcp-Name": nil}, false, ""},
		{"Mcp-Name mismatch", call("21", "echo", `{"text":"hi"}`, meta("")), http.Header{"Mcp-Name": {"count"}}, false, ""},
		{"no Mcp-Method", call("22", "echo", `{"text":"hi"}`, meta("")), http.Header{"Mcp-Method": nil}, false, ""},
		{"session ID not a string", call("23", "echo", `{"text":"hi"}`, meta(`,"`+MetaSessionID+`":42`)), nil, false, ""},
		{"no client capabilities", call("24", "echo", `{"text":"hi"}`, `{"io.modelcontextprotocol/protocolVersion":"`+RevisionStateless+`"}`), nil, false, ""},
		{"other protocol version in _meta", call("25", "echo", `{"text":"hi"}`, `{"io.modelcontextprotocol/protocolVersion":"2026-01-01","io.modelcontextprotocol/clientCapabilities":{}}`), nil, false, ""},
		{"no _meta", `{"jsonrpc":"2.0","id":26,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`, nil, false, ""},
		{"arguments not an object", call("27", "echo", `"hi"`, meta("")), nil, false, ""},
		{"task-augmented", strings.Replace(call("28", "echo", `{"text":"hi"}`, meta("")), `"name"`, `"task":{},"name"`, 1), nil, false, ""},
		{"notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","_meta":` + meta("") + `}}`, nil, false, ""},
		{"extra member", strings.Replace(call("29", "echo", `{"text":"hi"}`, meta("")), `"jsonrpc"`, `"x":1,"jsonrpc"`, 1), nil, false, ""},
		{"fractional ID", call("30.5", "echo", `{"text":"hi"}`, meta("")), nil, false, ""},
		{"not JSON", `{"jsonrpc":"2.0",`, nil, false, ""},
		{"capabilities of another shape", call("31", "echo", `{"text":"hi"}`, `{"io.modelcontextprotocol/protocolVersion":"`+RevisionStateless+`","io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":"yes"}}}`), nil, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"echo"}}
			for k, v := range tt.header {
				if v == nil {
					h.Del(k)
				} else {
					h[k] = v
				}
			}
			token := tt.token
			if token == "" {
				token = "alice-token"
			}
			before := fast.mcp.fast.Load()
			got := newRawClient(t, fast.url, token, RevisionStateless).post(tt.body, h)
			gotBody := string(readAll(t, got))
			want := newRawClient(t, sdk.url, token, RevisionStateless).post(tt.body, h)
			wantBody := string(readAll(t, want))
			if served := fast.mcp.fast.Load() - before; served != map[bool]uint64{true: 1}[tt.fast] {
				t.Errorf("the fast path answered %d requests, want %v", served, tt.fast)
			}
			if sdk.mcp.fast.Load() != 0 {
				t.Fatal("the fast path answered with sdkOnly set")
			}
			if got.StatusCode != want.StatusCode {
				t.Errorf("status %d, the SDK's %d", got.StatusCode, want.StatusCode)
			}
			for _, k := range []string{"Content-Type", "Cache-Control", "Connection"} {
				if got.Header.Get(k) != want.Header.Get(k) {
					t.Errorf("%s: %q, the SDK's %q", k, got.Header.Get(k), want.Header.Get(k))
				}
			}
			if gotBody != wantBody {
				t.Errorf("body:\n%s\nthe SDK's:\n%s", gotBody, wantBody)
			}
			if tt.fast && !strings.Contains(gotBody, `"result"`) {
				t.Errorf("no result in\n%s", gotBody)
			}
		})
	}
}

// TestFastCallProgress checks that a fast call's progress reaches the
// client before its result, each report an event of its own.
func TestFastCallProgress(t *testing.T) {
	ts := newTestServer(t, nil)
	c := newRawClient(t, ts.url, "alice-token", RevisionStateless)
	req := c.request(1, "tools/call", `{"name":"count","arguments":{}}`)
	req = strings.Replace(req, `"_meta":{`, `"_meta":{"progressToken":"p",`, 1)
	resp := c.post(req, http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"count"}})
	evs := sseEvents(readAll(t, resp))
	if ts.mcp.fast.Load() != 1 {
		t.Fatalf("the fast path answered %d requests, want 1", ts.mcp.fast.Load())
	}
	var methods []string
	for _, ev := range evs {
		var m struct {
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatal(err)
		}
		if m.Result != nil {
			methods = append(methods, "result")
		} else {
			methods = append(methods, m.Method)
		}
	}
	// count reports 5 steps and 5 output chunks, then returns.
	if len(methods) != 11 || methods[10] != "result" || methods[0] != "notifications/progress" {
		t.Errorf("events %q, want 10 progress notifications, then the result", methods)
	}
}
