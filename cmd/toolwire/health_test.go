package main

import (
	"encoding/json"
	"strings"
	"testing"

	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/h2raw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestHealthListen checks that --health-listen serves the health service,
// with the main listener's statuses, and nothing else, and refuses
// metadata past grpcserve.MaxHeaderBytes and messages past
// healthMaxMessageBytes.
func TestHealthListen(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--diag", "--health-listen", "127.0.0.1:0")
	var addr string
	waitFor(t, "the health listening line", func() bool {
		for line := range strings.SplitSeq(s.stderr.String(), "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "health listening on ") {
				addr = rec.Addr
				return true
			}
		}
		return false
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", toolwirev1.ToolService_ServiceDesc.ServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q on the health listener: %v, %v; want SERVING", svc, resp, err)
		}
	}
	// Its metadata is bounded as the gRPC port's is.
	if got := h2raw.Headers(t, addr, healthpb.Health_Check_FullMethodName, 5, 16<<10); got == "served" || got == "no answer" {
		t.Errorf("80 KiB of metadata on the health listener: %s; want it refused", got)
	}
	// So are its messages, which name a service: a health check is a few
	// bytes, and the listener's gRPC server would otherwise read 4 MiB
	// requests whole, from any client that reaches it.
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: strings.Repeat("x", 8<<10)}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("an 8 KiB health check on the health listener: %v; want RESOURCE_EXHAUSTED", err)
	}
	_, err = toolwirev1.NewToolServiceClient(conn).ListTools(t.Context(), &toolwirev1.ListToolsRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("ListTools on the health listener: %v, want Unimplemented", err)
	}
}
