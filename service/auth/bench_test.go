package auth_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolwire/toolwire/auth"
	"github.com/toolwire/toolwire/engine"
	grpcauth "github.com/toolwire/toolwire/service/auth"
	"google.golang.org/grpc"
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
