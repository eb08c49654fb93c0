package connectserve_test

import (
	"context"
	"log/slog"
	"testing"

	"connectrpc.com/connect"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// BenchmarkCallTool times one CallTool of echo over loopback HTTP, through
// the HTTP port as serve runs it (httpserve, the auth middleware with no
// tokens), in each protocol the generated client speaks; go run ./bench
// sets connect+proto beside the native gRPC CallTool.
//
//	go test ./connectserve -run '^$' -bench CallTool -benchmem
func BenchmarkCallTool(b *testing.B) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range protocols {
		b.Run(p.name, func(b *testing.B) {
			eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
			b.Cleanup(eng.Close)
			url := serveSurface(b, eng, reg, nil, httpserve.Config{})
			client := toolwirev1connect.NewToolServiceClient(httpClient(b, p.h2c), url, p.opts...)
			req := connect.NewRequest(&toolwirev1.CallToolRequest{Call: &toolwirev1.ToolCall{CallId: "1", Name: "echo", Arguments: `{"text":"hello"}`}})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.CallTool(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
