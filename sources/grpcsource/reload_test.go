package grpcsource

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// heldHealth's Check tells entered it has begun, then answers SERVING
// when release is closed or ends with its context.
type heldHealth struct {
	healthpb.UnimplementedHealthServer
	entered, release, cancelled chan struct{}
}

func (h *heldHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	close(h.entered)
	select {
	case <-h.release:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		close(h.cancelled)
		return nil, ctx.Err()
	}
}

// TestReloadLetsCallsFinish: a reload that changes a server while one of
// its calls runs lets the call finish on the old connection, with its
// result (it failed at once: "grpc: the client connection is closing"),
// while the new tools are served on a new one; the old connection closes
// once the call has returned. A call cancelled after the reload still
// cancels the server's work.
func TestReloadLetsCallsFinish(t *testing.T) {
	t.Parallel()
	for _, cancelIt := range []bool{false, true} {
		name := "finishes"
		if cancelIt {
			name = "cancelled"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := &heldHealth{entered: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
			ends := make(sourcetest.ConnEnds, 8)
			gs := grpc.NewServer(grpc.StatsHandler(ends))
			healthpb.RegisterHealthServer(gs, h)
			reflection.Register(gs)
			addr := serveOn(t, gs)
			s, reg, _ := newServices(t)
			cfg := Config{Name: "b", Target: addr, Insecure: true, Include: []string{"grpc.health.v1.Health"}}
			if err := s.Sync(t.Context(), []Config{cfg}); err != nil {
				t.Fatal(err)
			}
			sourcetest.WaitTools(t, reg, "Check and Watch", sourcetest.Has("b_Health_Check", "b_Health_Watch"))

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			results := make(chan string, 1)
			tl, _ := reg.Snapshot().Lookup("b_Health_Check")
			go func() {
				res, err := tl.Handler(ctx, tools.NewCall("c", "b_Health_Check", json.RawMessage(`{}`), nil))
				if err != nil {
					results <- err.Error()
					return
				}
				results <- text(res)
			}()
			sourcetest.Wait(t, h.entered, "the call to reach the server")

			// The reload: Watch is left out. Its tools come from a new
			// connection, once the old loop has returned.
			cfg.Exclude = []string{"*/Watch"}
			if err := s.Sync(t.Context(), []Config{cfg}); err != nil {
				t.Fatal(err)
			}
			sourcetest.WaitTools(t, reg, "the reloaded tools", func(names []string) bool {
				return slices.Contains(names, "b_Health_Check") && !slices.Contains(names, "b_Health_Watch")
			})
			select {
			case got := <-results:
				t.Fatalf("the call ended with the reload: %s", got)
			case <-ends:
				t.Fatal("the old connection closed with a call in flight")
			default:
			}

			if cancelIt {
				cancel()
				sourcetest.Wait(t, h.cancelled, "the cancellation to reach the server")
				if got := <-results; !strings.Contains(got, "context canceled") {
					t.Errorf("the call cancelled after the reload: %s", got)
				}
			} else {
				close(h.release)
				if got := <-results; !strings.Contains(got, "SERVING") {
					t.Errorf("the call in flight across the reload: %s", got)
				}
			}
			sourcetest.Wait(t, ends, "the old connection to close once its call returned")
		})
	}
}
