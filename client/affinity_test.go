package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/testenv"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// startReplicas serves n in-process servers on loopback TCP, each with a
// whoami tool answering its number and the SessionHeader it received, and
// returns a resolver that lists them all, as DNS does for a headless
// Service.
func startReplicas(t *testing.T, n int) *manual.Resolver {
	t.Helper()
	r := manual.NewBuilderWithScheme("replicas")
	var addrs []resolver.Address
	for i := range n {
		whoami := tools.MustTyped("whoami", "Says which replica answered.",
			func(ctx context.Context, _ *tools.Call, _ struct{}) (*tools.Result, string, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				return nil, fmt.Sprintf("replica %d, %s=%q", i, client.SessionHeader, md.Get(client.SessionHeader)), nil
			})
		reg, err := tools.NewRegistry(whoami)
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(eng.Close) // after Serve has returned: cleanups run last first
		srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
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
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	return r
}

// whoami runs one whoami batch of session and returns the answer.
func whoami(t *testing.T, c *client.Client, session string) string {
	t.Helper()
	b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{
		SessionId: session, Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "whoami"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var answer string // the typed tool's string, as JSON
	if err := json.Unmarshal([]byte(client.Text(b.Results[0])), &answer); err != nil {
		t.Fatalf("whoami answered %q: %v", client.Text(b.Results[0]), err)
	}
	return answer
}

// TestSessionAffinity checks WithSessionAffinity against three servers
// behind one resolver: a session's batches all reach one server, sessions
// spread over all three, and the header carries the session.
func TestSessionAffinity(t *testing.T) {
	t.Parallel()
	r := startReplicas(t, 3)
	c, err := client.New(r.Scheme()+":///toolwire", client.WithSessionAffinity(), client.WithDialOptions(grpc.WithResolvers(r)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	first := whoami(t, c, "session-1")
	if !strings.HasSuffix(first, `toolwire-session=["session-1"]`) {
		t.Errorf("the server saw %s; want the session in the header", first)
	}
	for i := range 99 {
		if got := whoami(t, c, "session-1"); got != first {
			t.Fatalf("batch %d of session-1 reached %q; the first reached %q", i+2, got, first)
		}
	}
	replicas := map[string]bool{}
	for i := range 60 {
		got := whoami(t, c, fmt.Sprintf("session-%d", i))
		replicas[got[:len("replica 0")]] = true
	}
	if len(replicas) != 3 {
		t.Errorf("60 sessions reached %v; want all three replicas", replicas)
	}
	// The server refuses session IDs over 256 bytes, so only IDs that are
	// not printable ASCII need the hashed form here.
	for _, id := range []string{"ünï\ncode", "tab\there"} {
		sum := sha256.Sum256([]byte(id))
		if got, want := whoami(t, c, id), `toolwire-session=["sha256:`+hex.EncodeToString(sum[:])+`"]`; !strings.HasSuffix(got, want) {
			t.Errorf("session %.20q, which cannot be a header value: %s; want %s", id, got, want)
		}
	}
	if got := whoami(t, c, ""); !strings.HasSuffix(got, "toolwire-session=[]") {
		t.Errorf("a batch without a session: %s; want no header", got)
	}
}

// TestWithoutSessionAffinity is the control: with round_robin and no
// affinity, one session's batches reach every server, so the affinity
// above is WithSessionAffinity's doing.
func TestWithoutSessionAffinity(t *testing.T) {
	t.Parallel()
	r := startReplicas(t, 3)
	c, err := client.New(r.Scheme()+":///toolwire", client.WithDialOptions(grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Until all three are reached: round_robin spreads calls over the
	// connections that are ready, and on a loaded machine thirty calls
	// could all come before the third was.
	replicas := map[string]bool{}
	deadline := testenv.Deadline(t)
	for len(replicas) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("round_robin sent session-1 to %v only; want all three", replicas)
		}
		got := whoami(t, c, "session-1")
		if !strings.HasSuffix(got, "toolwire-session=[]") {
			t.Fatalf("without affinity the header was sent: %s", got)
		}
		replicas[got[:len("replica 0")]] = true
	}
}
