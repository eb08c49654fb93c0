package auth_test

import (
	"log/slog"
	"testing"

	"github.com/toolwire/toolwire/auth"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/h2raw"
	"github.com/toolwire/toolwire/internal/testing/testoidc"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestRefusedBeforeTheRequestIsRead: a stream without valid credentials
// is refused as it opens, before its message is read. grpc-go reads a
// unary request whole before any interceptor runs, so a client without a
// token that announced 4 MiB messages and sent them slowly made the
// server hold them: 800 MB over 200 streams of one connection in 25 s.
// Here a raw HTTP/2 client announces such a message and sends none of
// it; the refusal must come anyway.
func TestRefusedBeforeTheRequestIsRead(t *testing.T) {
	t.Parallel()
	v, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveConfig(t, v, nil, grpcserve.Config{Admit: grpcauth.Admit(v, slog.New(slog.DiscardHandler))})
	for _, tc := range []struct{ method, authorization string }{
		{toolwirev1.ToolService_CallTool_FullMethodName, ""},
		{toolwirev1.ToolService_CallTool_FullMethodName, "Bearer wrong"},
		{toolwirev1.ToolService_ExecuteBatch_FullMethodName, ""},
		{toolwirev1.ToolService_ListTools_FullMethodName, "Basic YWxpY2U6eA=="},
	} {
		if code, msg := h2raw.Unsent(t, addr, tc.method, tc.authorization); code != "16" {
			t.Errorf("%s with %q: grpc-status %q (%s); want 16, UNAUTHENTICATED, before the request", tc.method, tc.authorization, code, msg)
		}
	}
	// With credentials, and on the open methods, RPCs are served; the
	// caller is the one the token names.
	conn := dial(t, addr, insecure.NewCredentials())
	if got, err := callWhoami(withAuthorization("Bearer "+aliceToken), conn); err != nil || got != "caller=alice" {
		t.Errorf("whoami with alice's token: %q, %v", got, err)
	}
	res, err := toolwirev1.NewToolServiceClient(conn).CallTool(withAuthorization("Bearer "+aliceToken), &toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "1", Name: "whoami"}})
	if err != nil || res.GetResult().GetContent()[0].GetText().GetText() != "caller=alice" {
		t.Errorf("CallTool with alice's token: %v, %v", res, err)
	}
	healthy(t, conn)
	if _, err := callWhoami(withAuthorization("Bearer wrong"), conn); status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != "invalid bearer token" {
		t.Errorf("a wrong token: %v; want UNAUTHENTICATED, invalid bearer token", err)
	}
}

// TestAdmitLeavesWaitingToTheInterceptors: a JWT whose issuer's keys are
// not fetched yet cannot be decided without waiting, which the
// connection's reader must not do: Admit lets the stream open and the
// interceptor decides it, waiting for the keys.
func TestAdmitLeavesWaitingToTheInterceptors(t *testing.T) {
	t.Parallel()
	iss := testoidc.New(t)
	v, err := auth.New(auth.Config{OIDC: &auth.OIDCConfig{Issuer: iss.URL, Audience: "toolwire"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveConfig(t, v, nil, grpcserve.Config{Admit: grpcauth.Admit(v, slog.New(slog.DiscardHandler))})
	conn := dial(t, addr, insecure.NewCredentials())
	token := iss.Token(t, "rsa-1", testoidc.Claims{"sub": "agent-1", "aud": "toolwire"})
	if got, err := callWhoami(withAuthorization("Bearer "+token), conn); err != nil || got != "caller=agent-1" {
		t.Errorf("the first JWT, keys not fetched: %q, %v", got, err)
	}
	if got, err := callWhoami(withAuthorization("Bearer "+token), conn); err != nil || got != "caller=agent-1" {
		t.Errorf("a JWT, keys fetched: %q, %v", got, err)
	}
}
