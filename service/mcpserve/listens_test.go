package mcpserve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestListenBounds: subscriptions/listen streams (2026-07-28) are bounded
// per caller and in all as sessions are; one past a bound is refused with
// CodeResourceExhausted naming it, and a stream that ends gives its place
// back. Before, nothing bounded them.
func TestListenBounds(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &Options{MaxSessionsPerCaller: 2, MaxSessions: 3})
	listen := func(token string) (*http.Response, rpcResponse) {
		t.Helper()
		c := newRawClient(t, ts.url, token, RevisionStateless)
		resp := c.post(c.request(1, "subscriptions/listen", `{"notifications":{"toolsListChanged":true}}`), http.Header{"Mcp-Method": {"subscriptions/listen"}})
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			// Open: its first event (subscriptions/acknowledged) came.
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("the listen stream ended before its first event: %v", err)
				}
				if strings.HasPrefix(line, "data: ") {
					break
				}
			}
			t.Cleanup(func() { resp.Body.Close() })
			return resp, rpcResponse{}
		}
		var r rpcResponse
		if err := json.Unmarshal(readAll(t, resp), &r); err != nil {
			t.Fatal(err)
		}
		return nil, r
	}
	refused := func(who string, r rpcResponse, bound string) {
		t.Helper()
		if r.Error == nil || r.Error.Code != CodeResourceExhausted || !strings.Contains(r.Error.Message, bound) || string(r.ID) != "1" {
			t.Errorf("%s: %+v, want error %d naming %s, answering id 1", who, r, CodeResourceExhausted, bound)
		}
	}
	first, _ := listen("alice-token")
	if first == nil {
		t.Fatal("alice's first listen refused")
	}
	if second, _ := listen("alice-token"); second == nil {
		t.Fatal("alice's second listen refused")
	}
	_, r := listen("alice-token")
	refused("alice's third listen", r, "mcp_max_sessions_per_caller")
	if bob, _ := listen("bob-token"); bob == nil {
		t.Fatal("bob's first listen refused: another caller's streams hold no place of his")
	}
	_, r = listen("bob-token")
	refused("bob's second listen, the server's fourth", r, "mcp_max_sessions")

	if t.Failed() {
		return
	}
	first.Body.Close()
	waitFor(t, "the closed stream's place", func() bool { return ts.mcp.listens.Held() == 2 })
	if again, _ := listen("alice-token"); again == nil {
		t.Error("a listen after one of alice's ended: refused")
	}
}
