package mcpserve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// TestPortRefusalIsAJSONRPCError: a tools/call whose body is past the HTTP
// port's limit gets a JSON-RPC error for that call (resource exhausted,
// naming the limit), not the port's Connect error body, so a stock go-sdk
// client fails that call only and its next call on the same session goes
// through, on both revisions.
func TestPortRefusalIsAJSONRPCError(t *testing.T) {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	defer eng.Close()
	srv, err := New(eng, reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := httpserve.New(httpserve.Config{MaxBodyBytes: 64 << 10}, nil, nil)
	port.Handle("/mcp", srv, Refuse)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- port.Serve(ctx, lis) }()
	defer func() { cancel(); srv.Shutdown(); <-served }()
	for _, rev := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(rev, func(t *testing.T) {
			cs := connect(t, "http://"+lis.Addr().String()+"/mcp", "", rev, nil)
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			big, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 200<<10)})
			_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "echo", Arguments: json.RawMessage(big)})
			if !isRPC(err, CodeResourceExhausted) || !strings.Contains(err.Error(), "http_max_body_bytes") {
				t.Errorf("a 200 KiB call: %v; want a resource-exhausted JSON-RPC error naming http_max_body_bytes", err)
			}
			if res := call(t, cs, "echo", `{"text":"after"}`, nil); text(res) != "after" {
				t.Errorf("the next call on the same session: %q", text(res))
			}
		})
	}
}
