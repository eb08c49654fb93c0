package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
)

// policyYAML is a config with the diag tools and one policy denying echo
// of word.
func policyYAML(word string) string {
	return `diag: true
policies:
  - name: no-` + word + `
    when: tool.name == "echo" && args.text == "` + word + `"
    effect: deny
    message: do not echo ` + word + `
`
}

// TestPoliciesServeAndReload: serve runs the config's policies on every
// call (a denied call gets NOT_PERMITTED with the rule's message and name,
// the batch goes on), puts a changed rule in force on reload, keeps the
// rules in force when a reload's rule does not compile (naming the rule and
// the position), and refuses to start with such a rule.
func TestPoliciesServeAndReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "toolwire.yaml")
	if err := os.WriteFile(path, []byte(policyYAML("secret")), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--config", path)
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func(words ...string) map[string]*toolwirev1.CallResult {
		t.Helper()
		var calls []*toolwirev1.ToolCall
		for _, w := range words {
			calls = append(calls, client.Call(w, "echo", map[string]any{"text": w}))
		}
		b, err := client.Collect(c.ExecuteBatch(context.Background(), &toolwirev1.ExecuteBatchRequest{Calls: calls}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*toolwirev1.CallResult{}
		for _, r := range b.Results {
			out[r.GetCallId()] = r
		}
		return out
	}
	denied := func(r *toolwirev1.CallResult, word string) bool {
		return r.GetErrorKind() == toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED &&
			strings.Contains(client.Text(r), "do not echo "+word) && r.GetDetails() == `{"policy":"no-`+word+`"}`
	}

	res := echo("secret", "hi")
	if !denied(res["secret"], "secret") || client.Text(res["hi"]) != "hi" {
		t.Fatalf("with no-secret: secret %v %q, hi %q", res["secret"].GetErrorKind(), client.Text(res["secret"]), client.Text(res["hi"]))
	}

	replaceFile(t, path, policyYAML("hi"))
	waitFor(t, "the new rule in force", func() bool { return denied(echo("hi")["hi"], "hi") })
	if r := echo("secret")["secret"]; client.Text(r) != "secret" {
		t.Errorf("after the reload, secret: %v %q", r.GetErrorKind(), client.Text(r))
	}

	replaceFile(t, path, strings.Replace(policyYAML("hi"), "args.text", "arg.text", 1))
	waitFor(t, "the rejected reload", func() bool {
		return strings.Contains(s.stderr.String(), `config reload rejected`) && strings.Contains(s.stderr.String(), `policy \"no-hi\": ERROR: <input>:1:`)
	})
	if r := echo("hi")["hi"]; !denied(r, "hi") {
		t.Errorf("after a rejected reload, the rule in force changed: %v %q", r.GetErrorKind(), client.Text(r))
	}

	// A rule that does not compile keeps serve from starting.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(policyYAML("x"), "effect: deny", "effect: perhaps", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	err = run(t.Context(), []string{"serve", "--listen", "127.0.0.1:0", "--no-workspace", "--config", bad}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error()+stderr.String(), `policy "no-x": effect "perhaps"`) {
		t.Errorf("serve with a bad rule: %v %s", err, stderr.String())
	}
}

// TestServeAuditLog: serve --audit-log writes one JSON line per call, the
// policy's decision in it, and no token.
func TestServeAuditLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "toolwire.yaml")
	if err := os.WriteFile(path, []byte(policyYAML("secret")+"audit_arguments: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := writeFile(t, "tokens", "alice: secret-token-of-alice\n")
	logPath := filepath.Join(dir, "audit.log")
	s := startServe(t, "--config", path, "--tokens-file", tokens, "--audit-log", logPath)
	batch := writeFile(t, "batch.json", `[{"call_id":"a","name":"echo","arguments":{"text":"hi"}},{"call_id":"b","name":"echo","arguments":{"text":"secret"}}]`)
	if got := runCmd(t, s.addr, "batch", "--token", "secret-token-of-alice", batch); got.err != nil && got.code != 1 {
		t.Fatalf("batch: %+v", got)
	}
	if err := s.stop(); err != nil { // the trail is synced and closed as serve ends
		t.Fatal(err)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || strings.Contains(string(b), "secret-token-of-alice") {
		t.Fatalf("audit log:\n%s", b)
	}
	for _, want := range []string{`"call_id":"a"`, `"caller":"alice"`, `"decision":"allow"`, `"outcome":"ok"`, `"arguments":{"text":"hi"}`} {
		if !strings.Contains(lines[0]+lines[1], want) {
			t.Errorf("audit log lacks %s:\n%s", want, b)
		}
	}
	if !strings.Contains(string(b), `"decision":"deny","rule":"no-secret"`) {
		t.Errorf("the denied call's line:\n%s", b)
	}
}

// TestPolicyReadsNumbersAsTheToolDoes: a policy allowing one account, by
// an ID past 2^53, refuses a charge to its neighbour, which a double
// cannot tell from it; the HTTP tool, which sends the arguments' numbers
// as written, is never asked to charge it.
func TestPolicyReadsNumbersAsTheToolDoes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var charged []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		charged = append(charged, string(b))
		mu.Unlock()
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	config := writeFile(t, "toolwire.yaml", `http_tools:
  - name: payments_charge
    description: Charges an account.
    method: POST
    url: `+up.URL+`/charge
    parameters:
      type: object
      properties:
        account: {type: integer}
        amount: {type: number}
      required: [account, amount]
policies:
  - name: one-account
    when: tool.name == "payments_charge" && args.account != 1234567890123456789
    effect: deny
    message: charge only account 1234567890123456789
`)
	s := startServe(t, "--config", config)
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{
		{CallId: "allowed", Name: "payments_charge", Arguments: `{"account":1234567890123456789,"amount":5}`},
		{CallId: "neighbour", Name: "payments_charge", Arguments: `{"account":1234567890123456788,"amount":5}`},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]*toolwirev1.CallResult{}
	for _, r := range b.Results {
		res[r.GetCallId()] = r
	}
	if r := res["allowed"]; r.GetIsError() {
		t.Errorf("the allowed account: %v %q", r.GetErrorKind(), client.Text(r))
	}
	if r := res["neighbour"]; r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_NOT_PERMITTED || r.GetDetails() != `{"policy":"one-account"}` {
		t.Errorf("the neighbouring account: %v %q; want NOT_PERMITTED by one-account", r.GetErrorKind(), client.Text(r))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(charged) != 1 || !strings.Contains(charged[0], "1234567890123456789") {
		t.Errorf("the upstream charged %q; want only account 1234567890123456789", charged)
	}
}
