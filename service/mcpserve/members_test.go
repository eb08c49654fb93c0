package mcpserve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

const initParams = `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`

// TestSessionsCannotBeSmuggled: a body that toolwire and the go-sdk could
// read differently (a member named twice, exactly or but for case; a
// value with more after it) is refused before either reads it, with a
// JSON-RPC error naming the problem, and opens no session: such an
// initialize read as a ping by toolwire opened a session of the SDK's that
// no bound counted and no idle timeout closed.
func TestSessionsCannotBeSmuggled(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{MaxSessions: 2, MaxSessionsPerCaller: 2})
	old := map[string]string{"Mcp-Protocol-Version": "2025-03-26"} // batches allowed
	for _, c := range []struct {
		name    string
		body    string
		header  map[string]string
		code    int64
		message string // a part of it
	}{
		{"Method after method", `{"jsonrpc":"2.0","id":1,"method":"initialize","Method":"ping","params":` + initParams + `}`, nil, jsonrpc.CodeInvalidRequest, `"method" and "Method"`},
		{"METHOD before method", `{"jsonrpc":"2.0","id":1,"METHOD":"ping","method":"initialize","params":` + initParams + `}`, nil, jsonrpc.CodeInvalidRequest, `"METHOD" and "method"`},
		{"method twice", `{"jsonrpc":"2.0","id":1,"method":"ping","method":"initialize","params":` + initParams + `}`, nil, jsonrpc.CodeInvalidRequest, `"method" twice`},
		{"escaped method twice", `{"jsonrpc":"2.0","id":1,"\u006dethod":"ping","method":"initialize","params":` + initParams + `}`, nil, jsonrpc.CodeInvalidRequest, `"method" twice`},
		{"ID and id", `{"jsonrpc":"2.0","id":1,"ID":2,"method":"initialize","params":` + initParams + `}`, nil, jsonrpc.CodeInvalidRequest, `"id" and "ID"`},
		{"id twice", `{"jsonrpc":"2.0","id":1,"id":null,"method":"initialize","params":` + initParams + `}`, nil, jsonrpc.CodeInvalidRequest, `"id" twice`},
		{"Params and params", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initParams + `,"Params":{}}`, nil, jsonrpc.CodeInvalidRequest, `"params" and "Params"`},
		{"in params", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","ProtocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil, jsonrpc.CodeInvalidRequest, `in params`},
		{"in a batch", `[{"jsonrpc":"2.0","id":1,"method":"initialize","Method":"ping","params":` + initParams + `}]`, old, jsonrpc.CodeInvalidRequest, `"method" and "Method"`},
		{"more after the message", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initParams + `} x`, nil, jsonrpc.CodeParseError, "malformed"},
		{"two messages", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initParams + `}{"jsonrpc":"2.0","id":2,"method":"ping"}`, nil, jsonrpc.CodeParseError, "malformed"},
		{"more after a batch", `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initParams + `}] x`, old, jsonrpc.CodeParseError, "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for range 3 { // more than the bounds allow
				r := ts.do(t, rawRequest{body: c.body, header: c.header})
				var got rpcRefusal
				if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusBadRequest || got.Error.Code != c.code || !strings.Contains(got.Error.Message, c.message) {
					t.Fatalf("%d %s (session %q)\nwant 400, a JSON-RPC error %d with %q", r.status, r.body, r.header.Get("Mcp-Session-Id"), c.code, c.message)
				}
				if id := r.header.Get("Mcp-Session-Id"); id != "" {
					t.Fatalf("a refusal opened session %s", id)
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	waitFor(t, "the SDK to hold no session", func() bool { return ts.sdkSessions() == 0 })
	// The bounds still hold what they should: a caller's sessions are all
	// counted, and a third of its own closes its first.
	a, b := ts.openSession(t, "alice-token"), ts.openSession(t, "alice-token")
	ts.openSession(t, "alice-token")
	if ts.alive(t, "alice-token", a) || !ts.alive(t, "alice-token", b) {
		t.Errorf("past the bound: the first session alive %v, the second %v; want false, true", ts.alive(t, "alice-token", a), ts.alive(t, "alice-token", b))
	}
}

// TestFastCallReadsAsTheSDK: a stateless tools/call with a member named
// twice is refused, not answered by the fast path with the name it read
// (the last) while the SDK would read another.
func TestFastCallReadsAsTheSDK(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + RevisionStateless + `","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"v0"}}`
	h := map[string]string{"Mcp-Protocol-Version": RevisionStateless, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
	for _, c := range []struct{ name, body, message string }{
		{"name twice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","name":"echo","arguments":{"text":"x"},` + meta + `}}`, `"name" twice`},
		{"Name and name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"read","name":"echo","arguments":{"text":"x"},` + meta + `}}`, `"Name" and "name"`},
		{"in _meta", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"` + RevisionStateless + `","io.modelcontextprotocol/clientCapabilities":{"roots":{},"Roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"v0"}}}}`, `in params._meta`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := ts.mcp.fast.Load()
			r := ts.do(t, rawRequest{body: c.body, header: h})
			var got rpcRefusal
			if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusBadRequest || got.Error.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(got.Error.Message, c.message) {
				t.Errorf("%d %s\nwant 400, a JSON-RPC error with %q", r.status, r.body, c.message)
			}
			if n := ts.mcp.fast.Load() - before; n != 0 {
				t.Errorf("the fast path answered it")
			}
		})
	}
	// Tool arguments are the engine's to read: names in them that differ
	// by case are not a refusal of the message but of the arguments, a
	// tool result the model can act on.
	r := ts.do(t, rawRequest{body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x","Text":"y"},` + meta + `}}`, header: h})
	if r.status != http.StatusOK || !strings.Contains(r.body, "INVALID_ARGUMENTS") || !strings.Contains(r.body, `members \"text\" and \"Text\"`) {
		t.Errorf("arguments with names differing by case: %d %s; want a result refusing the arguments", r.status, r.body)
	}
}

// TestUnreservedInitializeIsRefused: an initialize that reaches the SDK's
// handler with sessions having taken no place in the bounds (here: handed
// to it directly, as a disagreement between toolwire's reading and the
// SDK's would) is refused and opens no session.
func TestUnreservedInitializeIsRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initializeBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	w := httptest.NewRecorder()
	ts.mcp.stateful.ServeHTTP(w, req)
	body := w.Body.String()
	if !strings.Contains(body, `"error"`) || strings.Contains(body, `"result"`) || !strings.Contains(body, "cannot open a session") {
		t.Fatalf("an unreserved initialize: %d %s; want its JSON-RPC error", w.Code, body)
	}
	waitFor(t, "the SDK to close the session", func() bool { return ts.sdkSessions() == 0 })
}

// TestSweepClosesUntracked: a session of the SDK's that the bounds do not
// hold is closed at the second sweep that finds it (the first may find it
// opening), and one they hold is kept.
func TestSweepClosesUntracked(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	kept, lost := ts.openSession(t, "alice-token"), ts.openSession(t, "alice-token")
	ts.mcp.sessions.forget(lost) // as if it had been opened behind the bounds' back
	found := ts.mcp.sweepUntracked(nil)
	if len(found) != 1 || !ts.alive(t, "alice-token", lost) {
		t.Fatalf("the first sweep found %d sessions, want the one; closed it: %v", len(found), !ts.alive(t, "alice-token", lost))
	}
	ts.mcp.sweepUntracked(found)
	if ts.alive(t, "alice-token", lost) {
		t.Errorf("an untracked session outlived two sweeps")
	}
	if !ts.alive(t, "alice-token", kept) {
		t.Errorf("a tracked session was closed by the sweep")
	}
}

// TestCheckMembers: which names count as repeated, and where.
func TestCheckMembers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body string
		bad  bool
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, false},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1,"A":2,"a ":3}}}`, false},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":{"b":1,"b":2}}}}`, false},
		{`{"jsonrpc":"2.0","id":1,"result":{"x":1,"X":2}}`, false},
		{`[]`, false},
		{`5`, false},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","jsonRPC":"2.0"}`, true},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"a":[{"k":1,"K":2}]}}}`, true},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"\u212aey":1,"key":2}}}`, true}, // KELVIN SIGN folds to K
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"id":1,"Id":2}]`, true},
	} {
		if err := checkMembers([]byte(c.body)); (err != nil) != c.bad {
			t.Errorf("%s: %v; want refused %v", c.body, err, c.bad)
		}
	}
}

// TestEncodedBodyRefused: /mcp decompresses no body: one sent with a
// Content-Encoding is refused as such (415), not read as malformed JSON.
func TestEncodedBodyRefused(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	for _, h := range []map[string]string{
		{"Content-Encoding": "gzip"},
		{"Content-Encoding": "gzip", "Mcp-Protocol-Version": RevisionStateless},
	} {
		r := ts.do(t, rawRequest{body: "\x1f\x8b\x08\x00\x00\x00\x00\x00", header: h})
		var got rpcRefusal
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusUnsupportedMediaType || !strings.Contains(got.Error.Message, "Content-Encoding: gzip") {
			t.Errorf("%v: %d %s; want 415 naming the encoding", h, r.status, r.body)
		}
	}
}

// TestCheckMembersLinear: a body nested deep in _meta is read once, not
// once per level. Before, a 1 MB body nested 1,000 deep allocated 1 GB
// (and took 17 s); one of 3 MB nested 9,000 deep took a server past 20 GB.
// Not parallel: it counts the bytes the process allocates.
func TestCheckMembersLinear(t *testing.T) {
	const depth = 1000
	inner := `"` + strings.Repeat("x", 1<<20) + `"`
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x","text":"y"},"_meta":{"a":` +
		strings.Repeat("[", depth) + inner + strings.Repeat("]", depth) + `,"b":1,"B":2}}}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := checkMembers([]byte(body))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), `"b" and "B"`) {
		t.Errorf("got %v, want the repeated b in _meta", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
		t.Errorf("checking a %d-byte body nested %d deep allocated %d MiB; want it read once (a few MiB)", len(body), depth, n>>20)
	}
}
