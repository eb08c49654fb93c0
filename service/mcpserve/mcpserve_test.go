package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/tools"
)

// forEachRevision runs f as a subtest per revision, each against a server
// of its own.
func forEachRevision(t *testing.T, f func(t *testing.T, ts *testServer, rev string)) {
	t.Helper()
	for _, rev := range revisions {
		t.Run(rev, func(t *testing.T) {
			t.Parallel()
			f(t, newTestServer(t, nil), rev)
		})
	}
}

// TestListTools: tools/list offers the caller's permitted tools with their
// declarations; 2026-07-28 results carry private cache hints and the
// revision.
func TestListTools(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		ctx := context.Background()
		names := func(token string) ([]string, *mcp.ListToolsResult) {
			res, err := connect(t, ts.url, token, rev, nil).ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, tool := range res.Tools {
				out = append(out, tool.Name)
			}
			return out, res
		}
		all := ts.reg.Snapshot().Names()
		got, res := names("alice-token")
		if diff := cmp.Diff(all, got); diff != "" {
			t.Errorf("alice's tools (-want +got):\n%s", diff)
		}
		bobs, _ := names("bob-token")
		if want := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "secret" }); !slices.Equal(bobs, want) {
			t.Errorf("bob's tools: %v, want %v (no secret)", bobs, want)
		}
		if res.Meta[MetaRevision] != ts.reg.Snapshot().Revision() {
			t.Errorf("_meta %v, want %s %s", res.Meta, MetaRevision, ts.reg.Snapshot().Revision())
		}
		if res.CacheScope != "private" {
			t.Errorf("cacheScope %q, want private", res.CacheScope)
		}
		var echo, sleep *mcp.Tool
		for _, tool := range res.Tools {
			switch tool.Name {
			case "echo":
				echo = tool
			case "sleep":
				sleep = tool
			}
		}
		want := ts.reg.Snapshot()
		e, _ := want.Lookup("echo")
		if echo.Title != "Echo" || echo.Description != e.Description || !echo.Annotations.ReadOnlyHint || !echo.Annotations.IdempotentHint ||
			*echo.Annotations.DestructiveHint || *echo.Annotations.OpenWorldHint {
			t.Errorf("echo: %+v %+v", echo, echo.Annotations)
		}
		for _, c := range []struct {
			name       string
			got, want  any
			wantSchema json.RawMessage
		}{
			{"echo input", echo.InputSchema, nil, e.InputSchema},
			{"echo output", echo.OutputSchema, nil, e.OutputSchema},
		} {
			b, _ := json.Marshal(c.got)
			var g, w any
			_ = json.Unmarshal(b, &g)
			_ = json.Unmarshal(c.wantSchema, &w)
			if diff := cmp.Diff(w, g); diff != "" {
				t.Errorf("%s schema (-want +got):\n%s", c.name, diff)
			}
		}
		if sleep == nil || sleep.InputSchema == nil {
			t.Errorf("sleep: %+v", sleep)
		}
	})
}

// TestCallResults: results map back: text and structured content, images,
// tool errors and the engine's refusals as isError results with their
// error_kind in _meta, never as protocol errors.
func TestCallResults(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		alice := connect(t, ts.url, "alice-token", rev, nil)
		res := call(t, alice, "echo", `{"text":"héllo"}`, nil)
		if res.IsError || text(res) != "héllo" || res.Meta[MetaErrorKind] != nil {
			t.Errorf("echo: %+v", res)
		}
		if sc, _ := json.Marshal(res.StructuredContent); string(sc) != `{"text":"héllo"}` {
			t.Errorf("echo structuredContent %s", sc)
		}

		res = call(t, alice, "image", `{}`, nil)
		if len(res.Content) != 2 {
			t.Fatalf("image: %d blocks", len(res.Content))
		}
		if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || string(img.Data) != "\x89PNG\r\n\x1a\n" {
			t.Errorf("image block %#v", res.Content[1])
		}

		for _, c := range []struct {
			token, name, args, kind, text string
		}{
			{"alice-token", "fail", `{"message":"boom"}`, "TOOL_ERROR", "boom"},
			{"alice-token", "nope", `{}`, "UNKNOWN_TOOL", `unknown tool "nope"`},
			{"alice-token", "sleep", `{"ms":"x"}`, "INVALID_ARGUMENTS", "/ms"},
			// Not MCP's object, but what a model may produce and a client
			// pass on: a result, as on every surface.
			{"alice-token", "sleep", `["x"]`, "INVALID_ARGUMENTS", "must be a JSON object"},
			{"bob-token", "secret", `{}`, "NOT_PERMITTED", "not permitted"},
			{"alice-token", "multi_tool_use.parallel", `{"tool_uses":[]}`, "UNKNOWN_TOOL", "is not a tool"},
		} {
			cs := alice
			if c.token != "alice-token" {
				cs = connect(t, ts.url, c.token, rev, nil)
			}
			res := call(t, cs, c.name, c.args, nil)
			if !res.IsError || res.Meta[MetaErrorKind] != c.kind || !strings.Contains(text(res), c.text) {
				t.Errorf("%s as %s: isError %v, _meta %v, text %q; want %s, %q", c.name, c.token, res.IsError, res.Meta, text(res), c.kind, c.text)
			}
		}
	})
}

// TestIdentityReachesTools: the whole identity authentication put in the
// request's context (its ID, how it authenticated, its groups) is what a
// tool called through /mcp sees, on either revision, and each caller sees
// its own.
func TestIdentityReachesTools(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		for token, want := range map[string]string{"alice-token": "alice token humans,admins", "bob-token": "bob token "} {
			res := call(t, connect(t, ts.url, token, rev, nil), "identity", `{}`, nil)
			if res.IsError || text(res) != want {
				t.Errorf("identity as %s: %q (isError %v), want %q", token, text(res), res.IsError, want)
			}
		}
	})
}

// TestProgress: a call with a progress token gets the tool's reports as
// notifications/progress before its result, each progress larger than the
// last: a report with its own value keeps it, an output chunk (which has
// none) goes out just above the last, its text as the message and in
// _meta.
func TestProgress(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		var mu sync.Mutex
		var got []*mcp.ProgressNotificationParams
		cs := connect(t, ts.url, "alice-token", rev, &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				got = append(got, r.Params)
				mu.Unlock()
			},
		})
		params := &mcp.CallToolParams{Name: "count", Arguments: map[string]any{}}
		params.SetProgressToken("p1")
		res, err := cs.CallTool(context.Background(), params)
		if err != nil || res.IsError {
			t.Fatalf("count: %v %+v", err, res)
		}
		// The client hands notifications to its handler apart from the
		// response, so the last may land just after CallTool returns.
		waitFor(t, "10 progress notifications (5 reports, 5 output chunks)", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= 10
		})
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 10 {
			t.Fatalf("%d progress notifications, want 10", len(got))
		}
		last := -1.0
		for i, p := range got {
			step := i/2 + 1
			if p.ProgressToken != "p1" || p.Total != 5 || p.Progress <= last {
				t.Errorf("notification %d: %+v after progress %v", i, p, last)
			}
			if i%2 == 0 && (p.Progress != float64(step) || p.Message != fmt.Sprintf("step %d", step)) {
				t.Errorf("report %d: %+v", step, p)
			}
			if chunk := fmt.Sprintf("chunk %d\n", step); i%2 == 1 && (p.Message != chunk || p.Meta[MetaOutput] != chunk || p.Progress-last > 1e-9) {
				t.Errorf("output chunk %d: %+v", step, p)
			}
			last = p.Progress
		}
	})
}

// TestCancel: cancelling a call's context on the client cancels the tool
// (notifications/cancelled on 2025-11-25; the POST's end on 2026-07-28).
func TestCancel(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		var started atomic.Bool
		cs := connect(t, ts.url, "alice-token", rev, &mcp.ClientOptions{
			ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { started.Store(true) },
		})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			params := &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{}, Meta: mcp.Meta{MetaCallID: "held"}}
			params.SetProgressToken("h")
			_, err := cs.CallTool(ctx, params)
			errc <- err
		}()
		waitFor(t, "hold to start", started.Load)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("client: %v, want context.Canceled", err)
		}
		select {
		case id := <-ts.cancelled:
			if id != "held" {
				t.Errorf("cancelled %q, want held", id)
			}
		case <-time.After(time.Until(testenv.Deadline(t))): // must happen; 5s was a bet
			t.Fatal("the tool was not cancelled by the test's deadline")
		}
	})
}

// TestIdempotency: a call retried with the same idempotency key in _meta
// replays the first result; the same key with other arguments is a
// conflict.
func TestIdempotency(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		cs := connect(t, ts.url, "alice-token", rev, nil)
		key := mcp.Meta{MetaIdempotencyKey: "k1"}
		first := call(t, cs, "echo", `{"text":"once"}`, key)
		again := call(t, cs, "echo", `{"text":"once"}`, key)
		if first.Meta[MetaReplayed] != nil || again.Meta[MetaReplayed] != true || text(again) != "once" {
			t.Errorf("first %+v, again %+v; want the second replayed", first.Meta, again.Meta)
		}
		other := call(t, cs, "echo", `{"text":"twice"}`, key)
		if other.Meta[MetaErrorKind] != "IDEMPOTENCY_CONFLICT" {
			t.Errorf("other arguments: %+v", other)
		}
		// Keys are scoped by caller: bob's k1 is his own.
		bob := call(t, connect(t, ts.url, "bob-token", rev, nil), "echo", `{"text":"bob"}`, key)
		if bob.Meta[MetaReplayed] != nil || text(bob) != "bob" {
			t.Errorf("bob's k1: %+v", bob)
		}
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}, Meta: mcp.Meta{MetaIdempotencyKey: 7}}); !isRPC(err, jsonrpc.CodeInvalidParams) {
			t.Errorf("a key that is not a string: %v, want invalid params", err)
		}
	})
}

// isRPC reports whether err carries a JSON-RPC error of code.
func isRPC(err error, code int64) bool {
	var we *jsonrpc.Error
	return errors.As(err, &we) && we.Code == code
}

// TestListChanged: a tool added to the registry mid-session is announced
// (notifications/tools/list_changed on 2025-11-25, the
// subscriptions/listen stream on 2026-07-28), and the next list has it.
func TestListChanged(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		changed := make(chan struct{}, 10)
		cs := connect(t, ts.url, "alice-token", rev, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
		})
		ctx := context.Background()
		before, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		added := tools.MustTyped("added", "Added mid-test.", func(context.Context, *tools.Call, struct{}) (*tools.Result, any, error) {
			return tools.Text("here"), nil, nil
		})
		// The 2026-07-28 client opens its listen stream in Connect; give the
		// server a moment to register it before the change.
		waitFor(t, "the subscription", func() bool { return subscribers(ts) > 0 || rev != RevisionStateless })
		if err := ts.reg.Add(added); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(time.Until(testenv.Deadline(t))): // must happen; 5s was a bet
			t.Fatal("no list-changed notice by the test's deadline")
		}
		after, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Tools) != len(before.Tools)+1 || !slices.ContainsFunc(after.Tools, func(t *mcp.Tool) bool { return t.Name == "added" }) {
			t.Errorf("after the change: %d tools, want %d with added", len(after.Tools), len(before.Tools)+1)
		}
		if res := call(t, cs, "added", `{}`, nil); text(res) != "here" {
			t.Errorf("added: %+v", res)
		}
	})
}

// subscribers counts the sessions of ts's SDK server: on 2026-07-28 the
// only long-lived one is a subscriptions/listen stream.
func subscribers(ts *testServer) int {
	n := 0
	for range ts.mcp.sdk.Sessions() {
		n++
	}
	return n
}

// TestAuthRefused: without a valid token the test middleware answers 401
// and no session opens; a 2025-11-25 session is refused to any caller but
// the one that opened it.
func TestAuthRefused(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		for _, token := range []string{"", "wrong"} {
			if _, err := dial(t, ts.url, token, rev, nil); err == nil || !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
				t.Errorf("token %q: %v, want 401", token, err)
			}
		}
		if rev != RevisionSessions {
			return
		}
		alice := connect(t, ts.url, "alice-token", rev, nil)
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
		req, _ := http.NewRequest(http.MethodPost, ts.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", rev)
		req.Header.Set("Mcp-Session-Id", alice.ID())
		resp, err := httpClient(t, "bob-token").Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("bob on alice's session: %s, want 403", resp.Status)
		}
	})
}

// TestShutdownRefusesCalls: once the engine drains, a call is refused
// with CodeUnavailable, which names itself in the error's data.
func TestShutdownRefusesCalls(t *testing.T) {
	t.Parallel()
	forEachRevision(t, func(t *testing.T, ts *testServer, rev string) {
		cs := connect(t, ts.url, "alice-token", rev, nil)
		ts.eng.Drain()
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != CodeUnavailable || string(we.Data) != `{"code":"unavailable"}` || !strings.Contains(we.Message, "shutting down") {
			t.Errorf("call while draining: %v, want code %d", err, CodeUnavailable)
		}
	})
}
