package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	grpcsource "github.com/toolwire/toolwire/sources/grpcsource"
	mcpsource "github.com/toolwire/toolwire/sources/mcpsource"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// TestServeGRPCServices serves a gRPC health server's methods through
// "toolwire serve --config" with grpc_services: and calls Check with
// "toolwire call".
func TestServeGRPCServices(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	go gs.Serve(lis)
	defer gs.Stop()

	config := filepath.Join(t.TempDir(), "toolwire.yaml")
	if err := os.WriteFile(config, []byte("grpc_services:\n  - name: up\n    target: "+lis.Addr().String()+"\n    insecure: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--config", config)
	waitFor(t, "the health tools", func() bool {
		got := runCmd(t, s.addr, "tools")
		return got.code == 0 && strings.Contains(got.stdout, "up_Health_Check")
	})
	if got := runCmd(t, s.addr, "call", "up_Health_Check", `{"service":"db"}`); got.err != nil || !strings.Contains(got.stdout, "NOT_SERVING") {
		t.Errorf("call: %v\n%s%s", got.err, got.stdout, got.stderr)
	}
	if got := runCmd(t, s.addr, "call", "up_Health_Check", `{"service":"nope"}`); got.code == 0 || !strings.Contains(got.stdout+got.stderr, "NotFound") {
		t.Errorf("call of an unknown service: exit %d\n%s%s", got.code, got.stdout, got.stderr)
	}
}

// TestDocsGRPCServices checks the example of docs/sources.md's gRPC section.
func TestDocsGRPCServices(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/sources.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## gRPC services by reflection\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("no yaml block in the gRPC section of docs/sources.md")
	}
	cfg, _, err := parseServeArgs([]string{"--config", writeFile(t, "toolwire.yaml", block)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.GRPC) != 2 {
		t.Fatalf("grpc_services: %+v", cfg.GRPC)
	}
	if cfg.GRPC[1].StreamWindow != 5*time.Second {
		t.Errorf("stream_window: %s", cfg.GRPC[1].StreamWindow)
	}
	if err := grpcsource.ValidateAll(cfg.GRPC); err != nil {
		t.Error(err)
	}
}

// TestDocsMCPOAuth checks the example of docs/sources.md's OAuth section.
func TestDocsMCPOAuth(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/sources.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n### MCP servers behind OAuth\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("no yaml block in the OAuth section of docs/sources.md")
	}
	cfg, _, err := parseServeArgs([]string{"--config", writeFile(t, "toolwire.yaml", block)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.MCPServers) != 1 || cfg.MCPServers[0].OAuth == nil || len(cfg.MCPServers[0].OAuth.Scopes) != 2 {
		t.Fatalf("mcp_servers: %+v", cfg.MCPServers)
	}
	if err := mcpsource.ValidateAll(cfg.MCPServers); err != nil {
		t.Error(err)
	}
}
