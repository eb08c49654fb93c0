package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/client"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCallTool(t *testing.T) {
	t.Parallel()
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			c := newTestServer(t, transport, nil)
			ctx := testContext(t)
			r, err := c.CallTool(ctx, &toolwirev1.CallToolRequest{Call: client.Call("a", "echo", `{"text":"hi"}`), SessionId: "s"})
			if err != nil || r.GetIsError() || client.Text(r) != "hi" || r.GetCallId() != "a" {
				t.Errorf("echo: %v, %v; want hi", r, err)
			}
			r, err = c.CallTool(ctx, &toolwirev1.CallToolRequest{Call: client.Call("b", "nope", nil)})
			if err != nil || r.GetErrorKind() != toolwirev1.ErrorKind_ERROR_KIND_UNKNOWN_TOOL || !strings.Contains(client.Text(r), "Registered tools: echo, fail, sleep") {
				t.Errorf("unknown tool: %v, %v; want an UNKNOWN_TOOL result", r, err)
			}
			if _, err := c.CallTool(ctx, &toolwirev1.CallToolRequest{}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("no call: %v; want INVALID_ARGUMENT", err)
			}
		})
	}
}

func TestCallToolUnreachable(t *testing.T) {
	t.Parallel()
	c, err := client.New("127.0.0.1:1") // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r, err := c.CallTool(testContext(t), &toolwirev1.CallToolRequest{Call: client.Call("a", "echo", nil)}); r != nil || status.Code(err) != codes.Unavailable {
		t.Errorf("CallTool: %v, %v; want UNAVAILABLE", r, err)
	}
}

// TestCallToolSessionAffinity checks that CallTool sends its session in
// SessionHeader as ExecuteBatch does, so a session's single calls reach
// the replica its batches reach.
func TestCallToolSessionAffinity(t *testing.T) {
	t.Parallel()
	r := startReplicas(t, 3)
	c, err := client.New(r.Scheme()+":///toolwire", client.WithSessionAffinity(), client.WithDialOptions(grpc.WithResolvers(r)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 10 {
		session := "session-" + strings.Repeat("x", i)
		batch := whoami(t, c, session)
		res, err := c.CallTool(t.Context(), &toolwirev1.CallToolRequest{SessionId: session, Call: client.Call("1", "whoami", nil)})
		if err != nil {
			t.Fatal(err)
		}
		var got string // the typed tool's string, as JSON
		if err := json.Unmarshal([]byte(client.Text(res)), &got); err != nil || got != batch {
			t.Errorf("session %q: CallTool reached %s (%v); its batch reached %q", session, client.Text(res), err, batch)
		}
	}
}
