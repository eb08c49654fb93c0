package auth_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/toolwire/toolwire/auth"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/h2raw"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/internal/testing/testoidc"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
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

// TestOpenMethodsHoldLittle: the open methods are read without
// credentials, and grpc-go reads a request whole before its handler runs,
// so 200 health checks announcing 4 MiB each and sent slowly held 953 MB
// of a server that refuses every other unauthenticated stream as it
// opens. Now a health check's request must come within the read timeout,
// few are read at once, and few reflection streams are open without
// credentials; one more is refused as it opens.
func TestOpenMethodsHoldLittle(t *testing.T) {
	t.Parallel()
	v, err := auth.New(auth.Config{Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}})
	if err != nil {
		t.Fatal(err)
	}
	// Ten slow health checks: four are read (held: their read timeout is
	// an hour), six are refused at once. The timeout is not what frees
	// the slots here, so a loaded machine cannot free one while the ten
	// are still arriving; their closing connection does. A server each,
	// so that the second does not meet the first's slots still held.
	admit := func(read time.Duration) grpcserve.Config {
		return grpcserve.Config{Admit: grpcauth.AdmitBounded(v, slog.New(slog.DiscardHandler), 4, 2, read)}
	}
	var addr string
	var conn *grpc.ClientConn
	for _, method := range []string{healthpb.Health_Check_FullMethodName, healthpb.Health_Watch_FullMethodName} {
		addr = serveConfig(t, v, nil, admit(time.Hour))
		conn = dial(t, addr, insecure.NewCredentials())
		got, closeConn := h2raw.Held(t, addr, method, 10, 6)
		closeConn()
		counts := map[string]int{}
		for _, code := range got {
			counts[code]++
		}
		if counts["8"] != 6 || counts[""] != 4 {
			t.Errorf("%s: ten slow requests answered %q; want six RESOURCE_EXHAUSTED (8) at once and four held", method, got)
		}
		// The held requests' slots are given back as their connection
		// closes.
		deadline := testenv.Deadline(t)
		for {
			_, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
			if err == nil {
				break
			}
			if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
				t.Fatalf("a health check once the held requests' connection closed: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A request that does not come within the read timeout is refused
	// DEADLINE_EXCEEDED, and its slot given back.
	quick := serveConfig(t, v, nil, admit(200*time.Millisecond))
	for _, method := range []string{healthpb.Health_Check_FullMethodName, healthpb.Health_Watch_FullMethodName} {
		got, closeConn := h2raw.Held(t, quick, method, 2, 2)
		closeConn()
		if got[0] != "4" || got[1] != "4" {
			t.Errorf("%s: two requests never sent answered %q; want DEADLINE_EXCEEDED (4) once their read timed out", method, got)
		}
	}
	healthy(t, dial(t, quick, insecure.NewCredentials()))
	// The slots are given back: a real health check, and a Watch, are
	// served, many times over the bound.
	for range 10 {
		healthy(t, conn)
		w, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := w.Recv(); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health Watch: %v, %v", res, err)
		}
	}
	// A Watch held open after its request holds no slot.
	for range 5 {
		w, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	healthy(t, conn)

	// Reflection without credentials: two streams held, a third refused;
	// with credentials, served; once the two close, served again.
	const reflect = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	got, closeConn := h2raw.Held(t, addr, reflect, 3, 1)
	if got[2] != "8" {
		t.Errorf("a third reflection stream without credentials: %q; want RESOURCE_EXHAUSTED (8)", got)
	}
	if _, err := listServices(t.Context(), conn); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("reflection without credentials, two held: %v; want RESOURCE_EXHAUSTED", err)
	}
	if _, err := listServices(withAuthorization("Bearer "+aliceToken), conn); err != nil {
		t.Errorf("reflection with alice's token, two held without: %v", err)
	}
	closeConn()
	deadline := testenv.Deadline(t)
	for {
		_, err := listServices(t.Context(), conn)
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("reflection without credentials once the held streams closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listServices asks conn's reflection service for its services.
func listServices(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	// A stream the server ended already (refused) fails Send with io.EOF;
	// its status is Recv's.
	if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && err != io.EOF {
		return nil, err
	}
	res, err := s.Recv()
	if err != nil {
		return nil, err
	}
	_ = s.CloseSend()
	var names []string
	for _, svc := range res.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	return names, nil
}
