package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testoidc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// identityConfig gives the static token alice and the JWT callers (with
// caller_prefix) rules of their own under every name a rule can use.
const identityConfig = `diag: true
workspace_per_session: true
auth:
  oidc:
    issuer: %s
    audience: toolwire
    caller_prefix: "oidc:"
  permissions:
    alice:
      deny: [fail]
    "oidc:alice":
      deny: [sleep]
approvals:
  - tools: [sleep]
    callers: [alice]
approvers: [alice]
policies:
  - name: no-shouting
    when: caller.id == "oidc:alice" && tool.name == "echo" && args.text == "SHOUT"
    effect: deny
    message: no shouting
`

// TestServeOneCallerOneIdentity: a real toolwire serve accepting the
// static token "alice" and an issuer's JWTs whose sub is "alice" (with
// auth.oidc.caller_prefix "oidc:") treats them as two callers over real
// gRPC: each has its own permissions and listed tools, approval rules,
// approver rights, policies, idempotency records, session workspace,
// detached batches (GetBatch, AttachBatch, CancelBatch, ResolveApproval),
// audit lines and MCP session; and its own rate limit.
func TestServeOneCallerOneIdentity(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(dir, "audit.log")
	s := startServe(t, "--config", writeFile(t, "toolwire.yaml", fmt.Sprintf(identityConfig, iss.URL)),
		"--tokens-file", writeFile(t, "tokens", "alice: "+aliceToken+"\n"),
		"--workspace", ws, "--audit-log", audit, "--http-listen", "127.0.0.1:0")
	jwt := iss.Token(t, "ec-1", testoidc.Claims{"sub": "alice", "aud": "toolwire"})
	dial := func(token string) toolwirev1.ToolServiceClient {
		c, err := client.New(s.addr, client.WithInsecureToken(token))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.ToolService()
	}
	tok, oidc := dial(aliceToken), dial(jwt)
	ctx := t.Context()

	// Permissions, and what each lists.
	listed := func(c toolwirev1.ToolServiceClient) []string {
		resp, err := c.ListTools(ctx, &toolwirev1.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range resp.GetTools() {
			if n := tool.GetName(); n == "fail" || n == "sleep" {
				names = append(names, n)
			}
		}
		return names
	}
	if got := listed(tok); !slices.Equal(got, []string{"sleep"}) {
		t.Errorf("the token lists %q of fail and sleep; want sleep", got)
	}
	if got := listed(oidc); !slices.Equal(got, []string{"fail"}) {
		t.Errorf("the JWT lists %q of fail and sleep; want fail", got)
	}

	call := func(c toolwirev1.ToolServiceClient, session, key, name, args string) *toolwirev1.CallResult {
		t.Helper()
		resp, err := c.CallTool(ctx, &toolwirev1.CallToolRequest{SessionId: session,
			Call: &toolwirev1.ToolCall{CallId: "c", Name: name, Arguments: args, IdempotencyKey: key}})
		if err != nil {
			t.Fatalf("CallTool %s: %v", name, err)
		}
		return resp.GetResult()
	}
	text := func(r *toolwirev1.CallResult) string {
		var b strings.Builder
		for _, c := range r.GetContent() {
			b.WriteString(c.GetText().GetText())
		}
		return b.String()
	}

	// Idempotency records: the same key is the JWT's own, not a replay
	// (nor a conflict) of the token's.
	if r := call(tok, "", "k1", "echo", `{"text":"one"}`); text(r) != "one" || r.GetReplayed() {
		t.Errorf("the token's keyed echo: %q, replayed %v", text(r), r.GetReplayed())
	}
	if r := call(oidc, "", "k1", "echo", `{"text":"two"}`); text(r) != "two" || r.GetReplayed() || r.GetIsError() {
		t.Errorf("the JWT's echo with the token's key: %q, replayed %v, error %v; want it run", text(r), r.GetReplayed(), r.GetIsError())
	}
	if r := call(tok, "", "k1", "echo", `{"text":"one"}`); !r.GetReplayed() {
		t.Errorf("the token's echo again: replayed %v; want its own record replayed", r.GetReplayed())
	}

	// CEL policies see each caller's own ID.
	if r := call(tok, "", "", "echo", `{"text":"SHOUT"}`); r.GetIsError() {
		t.Errorf("the token's SHOUT: %q; want it run", text(r))
	}
	if r := call(oidc, "", "", "echo", `{"text":"SHOUT"}`); r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED || !strings.Contains(text(r), "no shouting") {
		t.Errorf("the JWT's SHOUT: %s %q; want it refused by the policy", r.GetErrorKind(), text(r))
	}

	// A session's workspace is its caller's.
	if r := call(tok, "s1", "", "write_file", `{"path":"note.txt","content":"the token's"}`); r.GetIsError() {
		t.Fatalf("write_file: %q", text(r))
	}
	if r := call(tok, "s1", "", "read_file", `{"path":"note.txt"}`); !strings.Contains(text(r), "the token's") {
		t.Errorf("the token reading its session's file: %q", text(r))
	}
	if r := call(oidc, "s1", "", "read_file", `{"path":"note.txt"}`); !r.GetIsError() || strings.Contains(text(r), "the token's") {
		t.Errorf("the JWT reading the token's session's file: %q; want it not found", text(r))
	}

	// A detached batch of the token's, held for approval (a rule naming
	// alice), is no batch of the JWT's.
	stream, err := tok.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{{CallId: "z", Name: "sleep", Arguments: `{"ms":1}`}},
		Options: &toolwirev1.BatchOptions{Detach: true}})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("the token's detached batch: %v", err)
		}
		if a := ev.GetAccepted(); a != nil {
			id = a.GetBatchId()
		}
		if ev.GetAwaitingApproval() != nil {
			break
		}
	}
	if b, err := tok.GetBatch(ctx, &toolwirev1.GetBatchRequest{BatchId: id}); err != nil || b.GetState() != toolwirev1.BatchState_BATCH_STATE_AWAITING_APPROVAL {
		t.Errorf("the token's GetBatch: %v, %v; want it awaiting approval", b.GetState(), err)
	}
	if b, err := oidc.GetBatch(ctx, &toolwirev1.GetBatchRequest{BatchId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("the JWT's GetBatch of the token's batch: %v, %v; want NOT_FOUND", b, err)
	}
	if att, err := oidc.AttachBatch(ctx, &toolwirev1.AttachBatchRequest{BatchId: id}); err == nil {
		if ev, err := att.Recv(); status.Code(err) != codes.NotFound {
			t.Errorf("the JWT's AttachBatch of the token's batch: %v, %v; want NOT_FOUND", ev, err)
		}
	}
	if _, err := oidc.CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("the JWT's CancelBatch of the token's batch: %v; want NOT_FOUND", err)
	}
	// Approver rights: the token alice is an approver (though not of her
	// own calls); the JWT's alice is not.
	resolve := &toolwirev1.ResolveApprovalRequest{BatchId: id, CallId: "z", Approved: true}
	if _, err := oidc.ResolveApproval(ctx, resolve); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "may not resolve approvals") {
		t.Errorf("the JWT resolving the token's call: %v; want PERMISSION_DENIED, no approver", err)
	}
	if _, err := tok.ResolveApproval(ctx, resolve); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "its own call") {
		t.Errorf("the token resolving its own call: %v; want PERMISSION_DENIED, its own", err)
	}
	if _, err := tok.CancelBatch(ctx, &toolwirev1.CancelBatchRequest{BatchId: id}); err != nil {
		t.Errorf("the token's CancelBatch: %v", err)
	}

	// An MCP session (2025-11-25) opened with the token is not the JWT's.
	var addr string
	waitFor(t, "the HTTP port's listening line", func() bool {
		var ok bool
		addr, ok = httpAddr(s.stderr.String())
		return ok
	})
	session := mcpInitialize(t, addr, aliceToken)
	if got := mcpList(t, addr, aliceToken, session); got != http.StatusOK {
		t.Errorf("tools/list on the token's MCP session with the token: %d", got)
	}
	if got := mcpList(t, addr, jwt, session); got != http.StatusForbidden {
		t.Errorf("tools/list on the token's MCP session with the JWT: %d; want 403", got)
	}

	// The audit trail names each.
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"caller":"alice","auth_method":"token"`, `"caller":"oidc:alice","auth_method":"jwt"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the audit trail lacks %s:\n%s", want, b)
		}
	}
}

// TestServeOneCallerOneRateLimit: the static token alice spending her
// rate does not spend the JWT alice's.
func TestServeOneCallerOneRateLimit(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	config := fmt.Sprintf("diag: true\nrate_per_caller: 0.0001\nrate_burst: 2\nauth:\n  oidc:\n    issuer: %s\n    audience: toolwire\n    caller_prefix: \"oidc:\"\n", iss.URL)
	s := startServe(t, "--config", writeFile(t, "toolwire.yaml", config), "--tokens-file", writeFile(t, "tokens", "alice: "+aliceToken+"\n"))
	batch := func(token string) error {
		c, err := client.New(s.addr, client.WithInsecureToken(token), client.WithRateLimitRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = client.Collect(c.ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
			client.Call("a", "echo", map[string]string{"text": "a"}), client.Call("b", "echo", map[string]string{"text": "b"}),
		}}))
		return err
	}
	jwt := iss.Token(t, "ec-1", testoidc.Claims{"sub": "alice", "aud": "toolwire"})
	if err := batch(aliceToken); err != nil {
		t.Fatalf("the token's first batch: %v", err)
	}
	if err := batch(aliceToken); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the token's second batch: %v; want RESOURCE_EXHAUSTED (its burst is spent)", err)
	}
	if err := batch(jwt); err != nil {
		t.Errorf("the JWT's batch after the token spent its burst: %v; want it run", err)
	}
}

// mcpInitialize opens a 2025-11-25 MCP session at addr with token and
// returns its ID.
func mcpInitialize(t *testing.T, addr, token string) string {
	t.Helper()
	resp := mcpPost(t, addr, token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"identity-test","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, id)
	}
	if resp := mcpPost(t, addr, token, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %s", resp.Status)
	}
	return id
}

// mcpList sends tools/list on session with token and returns the status.
func mcpList(t *testing.T, addr, token, session string) int {
	t.Helper()
	return mcpPost(t, addr, token, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`).StatusCode
}

func mcpPost(t *testing.T, addr, token, session, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
