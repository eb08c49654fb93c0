package mcpgw

import (
	"context"
	"testing"

	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/mcpgw/internal/testserver"
)

// BenchmarkCall measures one forwarded call of a small read-only tool, from
// the toolwire handler to the MCP server and back.
func BenchmarkCall(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  func(b *testing.B) ServerConfig
	}{
		{"stdio", func(*testing.B) ServerConfig { return ServerConfig{Name: "s", Command: stdioServer} }},
		{"http", func(b *testing.B) ServerConfig {
			return ServerConfig{Name: "s", URL: newHTTPServer(b, testserver.Hooks{}).URL}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			reg, _ := tools.NewRegistry()
			g := New(reg, nil)
			defer g.Close()
			if err := g.Sync(context.Background(), []ServerConfig{tc.cfg(b)}); err != nil {
				b.Fatal(err)
			}
			for {
				changed := reg.Changed()
				if _, ok := reg.Snapshot().Lookup("s_read"); ok {
					break
				}
				<-changed
			}
			tool, _ := reg.Snapshot().Lookup("s_read")
			args := []byte(`{"text":"hello"}`)
			b.ReportAllocs()
			for b.Loop() {
				res, err := tool.Handler(context.Background(), tools.NewCall("c", "s_read", args, nil))
				if err != nil || res.IsError {
					b.Fatal(err, res)
				}
			}
		})
	}
}
