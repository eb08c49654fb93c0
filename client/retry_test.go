package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rateLimitedServer serves the diag tools on TCP with a rate limit of 5
// calls a second, 1 at once, and returns its address.
func rateLimitedServer(t *testing.T) string {
	t.Helper()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{RatePerCaller: 5, RateBurst: 1}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close)
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// TestRateLimitRetries: a refusal with a RetryInfo is waited out and the
// call or batch sent again, by default; with no retries it comes back at
// once, its delay readable with RetryDelay.
func TestRateLimitRetries(t *testing.T) {
	t.Parallel()
	addr := rateLimitedServer(t)
	ctx := testContext(t)
	call := &toolwirev1.CallToolRequest{Call: client.Call("a", "echo", `{"text":"hi"}`)}

	patient, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close()
	for i := range 3 { // 1 at once, then one every 200ms: the last two wait
		if r, err := patient.CallTool(ctx, call); err != nil || client.Text(r) != "hi" {
			t.Fatalf("CallTool %d: %v, %v", i, r, err)
		}
	}
	b, err := client.Collect(patient.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("b", "echo", `{"text":"batch"}`)}}))
	if err != nil || client.Text(b.Results[0]) != "batch" {
		t.Fatalf("ExecuteBatch after the allowance: %v, %v", b, err)
	}

	hasty, err := client.New(addr, client.WithRateLimitRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer hasty.Close()
	_, err = hasty.CallTool(ctx, call)
	if d, ok := client.RetryDelay(err); status.Code(err) != codes.ResourceExhausted || !ok || d <= 0 || d > 250*time.Millisecond {
		t.Errorf("without retries: %v (delay %v, %v); want RESOURCE_EXHAUSTED with a RetryInfo", err, d, ok)
	}
	_, err = client.Collect(hasty.ExecuteBatch(ctx, &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("c", "echo", `{}`)}}))
	if _, ok := client.RetryDelay(err); status.Code(err) != codes.ResourceExhausted || !ok {
		t.Errorf("a batch without retries: %v", err)
	}
	// A context that ends first ends the wait.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := patient.CallTool(short, call); status.Code(err) != codes.ResourceExhausted && status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a context shorter than the delay: %v", err)
	}
}
