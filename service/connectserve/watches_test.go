package connectserve_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/engine/surfacetest"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/gen/toolwire/v1/toolwirev1connect"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/service/httpserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
)

// TestWatchToolsBounded: over a real port, a caller holds at most
// max_watches_per_caller WatchTools streams and the server max_watches;
// one more is refused with ResourceExhausted naming the bound, another
// caller is held only by the server's bound, and a stream that ends gives
// its place back.
func TestWatchToolsBounded(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{DrainTimeout: time.Second, MaxWatchesPerCaller: 2, MaxWatches: 3}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close)
	alice := surfacetest.Caller{Name: "alice", Token: token}
	bob := surfacetest.Caller{Name: "bob", Token: "bob-token-0123456789abc"}
	url := serveSurface(t, eng, reg, []surfacetest.Caller{alice, bob}, httpserve.Config{})
	client := toolwirev1connect.NewToolServiceClient(httpClient(t, false), url)

	// watch opens a stream as c and reads its first message: the stream
	// was served, or the error refusing it.
	watch := func(ctx context.Context, c surfacetest.Caller) error {
		req := connect.NewRequest(&toolwirev1.WatchToolsRequest{})
		req.Header().Set("Authorization", "Bearer "+c.Token)
		s, err := client.WatchTools(ctx, req)
		if err != nil {
			return err
		}
		if !s.Receive() {
			return s.Err()
		}
		return nil
	}
	refused := func(err error, bound string) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), bound) {
			t.Errorf("one stream past %s: %v; want ResourceExhausted naming it", bound, err)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, endFirst := context.WithCancel(ctx)
	defer endFirst()
	if err := watch(first, alice); err != nil {
		t.Fatalf("alice's first stream: %v", err)
	}
	if err := watch(ctx, alice); err != nil {
		t.Fatalf("alice's second stream: %v", err)
	}
	refused(watch(ctx, alice), "(max_watches_per_caller)")
	if err := watch(ctx, bob); err != nil {
		t.Fatalf("bob's first stream: %v", err)
	}
	refused(watch(ctx, bob), "(max_watches)")

	// The server counts a stream as ended once its handler returned, a
	// moment after the client ended it: wait for the place, not a time.
	endFirst()
	deadline := testenv.Deadline(t)
	for {
		err := watch(ctx, bob)
		if err == nil {
			break
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("bob's stream after alice ended one: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
