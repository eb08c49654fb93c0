package remote

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolwire/toolwire/internal/testing/loopback"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
)

// TestReloadLetsCallsFinish: a reload that changes a mount while one of
// its calls runs lets the call finish on the old connection, with its
// result (it failed at once, "lost the call after it started there, so it
// may have run"), while the new mount connects anew; the old connection
// closes once the call has returned. A call cancelled after the reload
// still cancels the remote's work.
func TestReloadLetsCallsFinish(t *testing.T) {
	t.Parallel()
	for _, cancelIt := range []bool{false, true} {
		name := "finishes"
		if cancelIt {
			name = "cancelled"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			entered, release, cancelled := make(chan struct{}), make(chan struct{}), make(chan struct{})
			held := tools.Tool{
				Name: "held", Description: "Answers when released.",
				Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
					close(entered)
					select {
					case <-release:
						return tools.Text("done"), nil
					case <-ctx.Done():
						close(cancelled)
						return nil, ctx.Err()
					}
				},
			}
			regB, err := tools.NewRegistry(held)
			if err != nil {
				t.Fatal(err)
			}
			ends := make(sourcetest.ConnEnds, 8)
			watches := make(chan struct{}, 8)
			countWatches := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if strings.HasSuffix(info.FullMethod, "/WatchTools") {
					watches <- struct{}{}
				}
				return h(srv, ss)
			}
			srvB := loopback.Serve(t, regB, grpcserve.Config{}, grpc.StatsHandler(ends), grpc.StreamInterceptor(countWatches))

			mounts, regA := newMounts(t)
			cfg := Config{Name: "b", Target: srvB.Addr, Insecure: true}
			if err := mounts.Sync(t.Context(), []Config{cfg}); err != nil {
				t.Fatal(err)
			}
			sourcetest.WaitTools(t, regA, "B's tools on A", sourcetest.Has("b_held"))
			<-watches

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			tl, _ := regA.Snapshot().Lookup("b_held")
			results := make(chan string, 1)
			go func() {
				res, err := tl.Handler(ctx, tools.NewCall("c", "b_held", json.RawMessage(`{}`), nil))
				if err != nil {
					results <- err.Error()
					return
				}
				results <- res.Content[0].Text
			}()
			sourcetest.Wait(t, entered, "the call to reach the remote")

			// The reload: the same remote by another name. The new mount
			// watches once the old one's loop has returned.
			cfg.Target = "passthrough:///" + srvB.Addr
			if err := mounts.Sync(t.Context(), []Config{cfg}); err != nil {
				t.Fatal(err)
			}
			sourcetest.Wait(t, watches, "the new mount's watch")
			select {
			case got := <-results:
				t.Fatalf("the call ended with the reload: %s", got)
			case <-ends:
				t.Fatal("the old connection closed with a call in flight")
			default:
			}

			if cancelIt {
				cancel()
				sourcetest.Wait(t, cancelled, "the cancellation to reach the remote")
				if got := <-results; !strings.Contains(got, "context canceled") {
					t.Errorf("the call cancelled after the reload: %s", got)
				}
			} else {
				close(release)
				if got := <-results; got != "done" {
					t.Errorf("the call in flight across the reload: %s", got)
				}
			}
			sourcetest.Wait(t, ends, "the old connection to close once its call returned")
		})
	}
}
