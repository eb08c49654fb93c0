package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	"github.com/toolwire/toolwire/policy"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
)

// whoami reports the caller it runs for.
var whoami = tools.Tool{Name: "whoami", Description: "returns the caller", Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
	return tools.Text("caller=" + engine.CallerFrom(ctx)), nil
}}

// identity reports the whole identity of the caller it runs for
// (describe).
var identity = tools.Tool{Name: "identity", Description: "returns the caller's identity", Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
	return tools.Text(describe(engine.IdentityFrom(ctx))), nil
}}

// describe writes an identity as "ID method group,group".
func describe(id *engine.Identity) string {
	return id.ID + " " + id.Method + " " + strings.Join(id.Groups, ",")
}

// serve runs a toolwire server with the diag tools and whoami, authenticated
// by v, on real TCP, until the test ends; it returns the address.
func serve(t *testing.T, v *auth.Verifier, perms policy.Permissions, opts ...grpc.ServerOption) string {
	t.Helper()
	return serveConfig(t, v, perms, grpcserve.Config{}, opts...)
}

// serveConfig is serve with the surface's cfg.
func serveConfig(t *testing.T, v *auth.Verifier, perms policy.Permissions, cfg grpcserve.Config, opts ...grpc.ServerOption) string {
	t.Helper()
	reg, err := tools.NewRegistry(append(diag.Tools(), whoami, identity)...)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := policy.New(perms, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler), Admission: rules})
	t.Cleanup(eng.Close) // after Serve has returned: cleanups run last first
	srv, err := grpcserve.New(eng, reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(ctx, lis, append(opts, grpcauth.Interceptors(v, slog.New(slog.DiscardHandler))...)...)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func withAuthorization(v string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", v)
}

// callWhoami runs whoami in a batch and returns its text, or the RPC's error.
func callWhoami(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	return callTool(ctx, conn, "whoami")
}

// callTool calls the tool name, without arguments, and returns its text.
func callTool(ctx context.Context, conn *grpc.ClientConn, name string) (string, error) {
	stream, err := toolwirev1.NewToolServiceClient(conn).ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: name}}})
	if err != nil {
		return "", err
	}
	var out string
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		if r := ev.GetResult(); r != nil {
			out = r.GetContent()[0].GetText().GetText()
		}
	}
}

func healthy(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check without credentials: %v %v, want SERVING", resp, err)
	}
}

func TestBearerTokens(t *testing.T) {
	t.Parallel()
	a, err := auth.New(auth.Config{Tokens: []auth.Token{
		{Name: "alice", Hash: auth.HashToken(aliceToken)},
		{Name: "bob", Hash: auth.HashToken(bobToken)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, serve(t, a, nil), insecure.NewCredentials())
	healthy(t, conn)

	for _, tc := range []struct {
		name, authorization string
		second              string // a second authorization header, when set
		want                string
		wantMsg             string // of the UNAUTHENTICATED status, when one is wanted
	}{
		{name: "missing", wantMsg: "missing credentials"},
		{name: "wrong", authorization: "Bearer not-a-token-of-ours-at-all", wantMsg: "invalid bearer token"},
		{name: "not bearer", authorization: "Basic " + aliceToken, wantMsg: "malformed authorization"},
		{name: "empty bearer", authorization: "Bearer ", wantMsg: "malformed authorization"},
		{name: "bearer and spaces", authorization: "Bearer   ", wantMsg: "malformed authorization"},
		{name: "alice", authorization: "Bearer " + aliceToken, want: "caller=alice"},
		{name: "bob, lower-case scheme", authorization: "bearer " + bobToken, want: "caller=bob"},
		{name: "two headers, both valid", authorization: "Bearer " + aliceToken, second: "Bearer " + bobToken, wantMsg: "2 authorization headers"},
		{name: "two headers, the first valid", authorization: "Bearer " + aliceToken, second: "Bearer wrong", wantMsg: "2 authorization headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.authorization != "" {
				ctx = withAuthorization(tc.authorization)
			}
			if tc.second != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.second)
			}
			got, err := callWhoami(ctx, conn)
			if tc.wantMsg != "" {
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("ExecuteBatch: err = %v, want UNAUTHENTICATED with %q", err, tc.wantMsg)
				}
				_, err := toolwirev1.NewToolServiceClient(conn).ListTools(ctx, &toolwirev1.ListToolsRequest{})
				if status.Code(err) != codes.Unauthenticated {
					t.Errorf("ListTools: err = %v, want UNAUTHENTICATED", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("whoami = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestNoAuthenticationMeansTheAnonymousCaller(t *testing.T) {
	t.Parallel()
	a, err := auth.New(auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := callWhoami(context.Background(), dial(t, serve(t, a, nil), insecure.NewCredentials()))
	if err != nil || got != "caller=" {
		t.Errorf("whoami = %q, %v; want the anonymous caller", got, err)
	}
}

func TestPermissionsByTokenName(t *testing.T) {
	t.Parallel()
	a, err := auth.New(auth.Config{Tokens: []auth.Token{
		{Name: "alice", Hash: auth.HashToken(aliceToken)},
		{Name: "bob", Hash: auth.HashToken(bobToken)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, serve(t, a, policy.Permissions{"alice": {Allow: []string{"echo"}}}), insecure.NewCredentials())
	c := toolwirev1.NewToolServiceClient(conn)
	list := func(token string) []string {
		resp, err := c.ListTools(withAuthorization("Bearer "+token), &toolwirev1.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, t := range resp.GetTools() {
			names = append(names, t.GetName())
		}
		return names
	}
	if got := list(aliceToken); strings.Join(got, ",") != "echo" {
		t.Errorf("alice's tools = %v, want [echo]", got)
	}
	if got := list(bobToken); len(got) != 5 {
		t.Errorf("bob's tools = %v, want all five", got)
	}
	if got, err := callWhoami(withAuthorization("Bearer "+aliceToken), conn); err != nil || !strings.HasPrefix(got, "not permitted") {
		t.Errorf("alice calling whoami: %q, %v; want a not-permitted result", got, err)
	}
	if got, err := callWhoami(withAuthorization("Bearer "+bobToken), conn); err != nil || got != "caller=bob" {
		t.Errorf("bob calling whoami: %q, %v", got, err)
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca, other := testpki.New(t, "toolwire test CA"), testpki.New(t, "some other CA")
	certFile, keyFile := testpki.WritePEM(t, t.TempDir(), "server", ca.Issue(t, testpki.Server))
	a, err := auth.New(auth.Config{ClientCAs: ca.Pool(), Tokens: []auth.Token{{Name: "alice", Hash: auth.HashToken(aliceToken)}}, CertificateCallerPrefix: "cert:"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := grpcauth.ServerCredentials(certFile, keyFile, a)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, a, nil, grpc.Creds(creds))
	connect := func(certs ...tls.Certificate) *grpc.ClientConn {
		return dial(t, addr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: certs}))
	}

	for _, tc := range []struct {
		name    string
		certs   []tls.Certificate
		ctx     context.Context
		want    string // whoami's answer, or
		wantMsg string // the UNAUTHENTICATED status's message
	}{
		{name: "valid", certs: []tls.Certificate{ca.Issue(t, testpki.Client("agent-7"))}, want: "caller=cert:agent-7"},
		{name: "SPIFFE ID", certs: []tls.Certificate{ca.Issue(t, testpki.Client("", func(c *x509.Certificate) {
			c.URIs = []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/agent"}}
		}))}, want: "caller=cert:spiffe://example.org/agent"},
		{name: "a bidi override in the common name", certs: []tls.Certificate{ca.Issue(t, testpki.Client("\u202eecila"))}, wantMsg: "a caller's name is printable text"},
		{name: "a SPIFFE ID as common name", certs: []tls.Certificate{ca.Issue(t, testpki.Client("spiffe://example.org/agent"))}, wantMsg: "is a URI its URI SANs do not hold"},
		{name: "expired", certs: []tls.Certificate{ca.Issue(t, testpki.Client("agent-7", func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
		}))}, wantMsg: "expired"},
		{name: "wrong CA", certs: []tls.Certificate{other.Issue(t, testpki.Client("agent-7"))}, wantMsg: "unknown authority"},
		{name: "server certificate", certs: []tls.Certificate{ca.Issue(t, func(c *x509.Certificate) {
			c.Subject.CommonName = "agent-7"
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		})}, wantMsg: "client certificate rejected"},
		{name: "none", wantMsg: "missing credentials"},
		{name: "token, no certificate", ctx: withAuthorization("Bearer " + aliceToken), want: "caller=alice"},
		{name: "wrong token beats a valid certificate", certs: []tls.Certificate{ca.Issue(t, testpki.Client("agent-7"))},
			ctx: withAuthorization("Bearer not-a-token-of-ours-at-all"), wantMsg: "invalid bearer token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := connect(tc.certs...)
			healthy(t, conn)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got, err := callWhoami(ctx, conn)
			if tc.wantMsg != "" {
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("err = %v, want UNAUTHENTICATED with %q", err, tc.wantMsg)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("whoami = %q, %v; want %q", got, err, tc.want)
			}
		})
	}

	// A plaintext client gets no further than the handshake.
	plain := dial(t, addr, insecure.NewCredentials())
	if _, err := healthpb.NewHealthClient(plain).Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("a plaintext client reached a TLS server")
	}
}
