package auth_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testpki"
	"github.com/toolwire/toolwire/service/grpcserve"
	grpcauth "github.com/toolwire/toolwire/service/grpcserve/auth"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// BenchmarkTokenInterceptor measures what authenticating one RPC by bearer
// token costs, with the matching token last among n.
func BenchmarkTokenInterceptor(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			toks := make([]auth.Token, n)
			for i := range toks {
				toks[i] = auth.Token{Name: fmt.Sprint("caller-", i), Hash: auth.HashToken(fmt.Sprint("token-0123456789abcdef-", i))}
			}
			v, err := auth.New(auth.Config{Tokens: toks})
			if err != nil {
				b.Fatal(err)
			}
			intercept := grpcauth.UnaryInterceptor(v, nil)
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", fmt.Sprint("Bearer token-0123456789abcdef-", n-1)))
			info := &grpc.UnaryServerInfo{FullMethod: "/toolwire.v1.ToolService/ListTools"}
			want := fmt.Sprint("caller-", n-1)
			handler := func(ctx context.Context, _ any) (any, error) {
				if engine.CallerFrom(ctx) != want {
					b.Fatalf("caller %q", engine.CallerFrom(ctx))
				}
				return nil, nil
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := intercept(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAuthenticatedBatch measures a one-call ExecuteBatch of echo over
// loopback TCP as toolwire serve runs it, authenticated by a bearer token
// (plaintext) or by a client certificate (TLS, checked for each RPC, its
// check remembered by the Verifier): the native gRPC one-call path with
// authentication on.
//
//	go test ./service/auth -run '^$' -bench AuthenticatedBatch -count 6
func BenchmarkAuthenticatedBatch(b *testing.B) {
	const token = "bench-token-0123456789abcdef"
	for _, run := range []struct {
		mode  string
		admit bool // as serve runs it: decided as the stream opens
	}{{"token", false}, {"token", true}, {"certificate", false}, {"certificate", true}} {
		mode := run.mode
		b.Run(fmt.Sprintf("%s/admit=%v", mode, run.admit), func(b *testing.B) {
			ca := testpki.New(b, "bench CA")
			certFile, keyFile := testpki.WritePEM(b, b.TempDir(), "server", ca.Issue(b, testpki.Server))
			vcfg := auth.Config{Tokens: []auth.Token{{Name: "agent", Hash: auth.HashToken(token)}}}
			ctx := context.Background()
			var creds credentials.TransportCredentials = insecure.NewCredentials()
			var cfg auth.ServerConfig
			if mode == "certificate" {
				vcfg.ClientCAs, vcfg.CertificateCallerPrefix = ca.Pool(), "cert:"
				cfg.TLSCert, cfg.TLSKey = certFile, keyFile
				creds = credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Issue(b, testpki.Client("agent"))}})
			} else {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
			}
			v, err := auth.New(vcfg)
			if err != nil {
				b.Fatal(err)
			}
			opts, err := grpcauth.ServerOptions(cfg, v, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			var sc grpcserve.Config
			if run.admit {
				sc.Admit = grpcauth.Admit(v, slog.New(slog.DiscardHandler))
			}
			c := toolwirev1.NewToolServiceClient(benchServe(b, sc, opts, creds))
			req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "echo", Arguments: `{"text":"hello"}`}}}
			b.ReportAllocs()
			for b.Loop() {
				stream, err := c.ExecuteBatch(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					ev, err := stream.Recv()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if r := ev.GetResult(); r != nil && r.GetIsError() {
						b.Fatal(r)
					}
				}
			}
		})
	}
}

// benchServe serves the diag tools with Serve and opts on loopback TCP
// until the benchmark ends, and returns a connection to it made with creds.
func benchServe(b *testing.B, sc grpcserve.Config, opts []grpc.ServerOption, creds credentials.TransportCredentials) *grpc.ClientConn {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	b.Cleanup(eng.Close) // after Serve has returned: cleanups run last first
	srv, err := grpcserve.New(eng, reg, sc)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, opts...) }()
	b.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			b.Error(err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}
