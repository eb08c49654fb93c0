package mcpserve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestDeclaresOnlyTools: /mcp declares the tools capability (with
// list-changed notices) and nothing else, in initialize's result and in
// server/discover's, and answers what it does not declare as MCP says a
// server answers a method gated behind a capability it did not advertise:
// -32601 Method not found (HTTP 404 on 2026-07-28).
// The go-sdk alone answers prompts/list, resources/list,
// resources/templates/list and logging/setLevel with empty results, which
// the conformance suite's server-stateless reads as prompts and resources
// served but not declared.
func TestDeclaresOnlyTools(t *testing.T) {
	t.Parallel()
	const want = `{"tools":{"listChanged":true}}`
	undeclared := []struct{ method, params string }{
		{"prompts/list", `{}`},
		{"prompts/get", `{"name":"p"}`},
		{"resources/list", `{}`},
		{"resources/templates/list", `{}`},
		{"resources/read", `{"uri":"test://r"}`},
		{"resources/subscribe", `{"uri":"test://r"}`},
		{"resources/unsubscribe", `{"uri":"test://r"}`},
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"b"}}`},
		{"logging/setLevel", `{"level":"debug"}`},
	}
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		cs := connect(t, ts.url, "alice-token", rev, nil)
		got, err := json.Marshal(cs.InitializeResult().Capabilities)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("declared capabilities %s, want %s", got, want)
		}

		c := newRawClient(t, ts.url, "alice-token", rev)
		if rev >= RevisionStateless {
			status, resp := c.call(1, "server/discover", "")
			var discover struct {
				Capabilities json.RawMessage `json:"capabilities"`
			}
			if status != http.StatusOK || resp.Error != nil || json.Unmarshal(resp.Result, &discover) != nil {
				t.Fatalf("server/discover: %d %+v %+v", status, resp, resp.Error)
			}
			if string(discover.Capabilities) != want {
				t.Errorf("server/discover declares %s, want %s", discover.Capabilities, want)
			}
		}
		for i, u := range undeclared {
			status, resp := c.call(10+i, u.method, u.params)
			if resp.Error == nil {
				t.Errorf("%s: answered %s; want Method not found", u.method, resp.Result)
				continue
			}
			if resp.Error.Code != -32601 {
				t.Errorf("%s: error %d %q; want -32601", u.method, resp.Error.Code, resp.Error.Message)
			}
			if string(resp.ID) != jsonInt(10+i) {
				t.Errorf("%s: the error answers id %s, want %d", u.method, resp.ID, 10+i)
			}
			wantStatus := http.StatusOK // the error rides in the response stream
			if rev >= RevisionStateless {
				wantStatus = http.StatusNotFound // SEP-2575's status for -32601
			}
			if status != wantStatus {
				t.Errorf("%s: HTTP %d, want %d", u.method, status, wantStatus)
			}
			if !strings.Contains(resp.Error.Message, u.method) {
				t.Errorf("%s: message %q does not name the method", u.method, resp.Error.Message)
			}
		}
		// A method of no revision is Method not found too (it was -32600
		// on 2025-11-25), in a refusal of the request (HTTP 400 there).
		status, resp := c.call(30, "no/such", `{}`)
		if resp.Error == nil || resp.Error.Code != -32601 || string(resp.ID) != "30" || !strings.Contains(resp.Error.Message, "no/such") || status < 400 {
			t.Errorf("no/such: HTTP %d, %+v %+v; want -32601 naming it, answering id 30", status, resp, resp.Error)
		}
		// What is declared is still served.
		if status, resp := c.call(40, "tools/list", ""); status != http.StatusOK || resp.Error != nil || !strings.Contains(string(resp.Result), `"echo"`) {
			t.Errorf("tools/list: %d %+v", status, resp)
		}
		if rev < RevisionStateless {
			if status, resp := c.call(41, "ping", ""); status != http.StatusOK || resp.Error != nil {
				t.Errorf("ping: %d %+v", status, resp)
			}
		}
	})
}

func jsonInt(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
