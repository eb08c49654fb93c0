package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc"
)

// docs/deploy.md tells clients to dial the headless Service through DNS with
// the round_robin policy. This test does exactly that against two real
// servers on two loopback addresses and a DNS server that, like the
// cluster's DNS for a headless Service, answers with both pod addresses.

// headlessName is the headless Service's name in the overlays' namespace.
const headlessName = "toolwire-headless.toolwire.svc.cluster.local"

func TestHeadlessServiceBalancing(t *testing.T) {
	t.Parallel()
	pods := []string{"127.0.0.1", "127.0.0.2"}
	port := startPods(t, pods)
	dnsAddr := startDNS(t, headlessName+".", pods)
	target := fmt.Sprintf("dns://%s/%s:%s", dnsAddr, headlessName, port)

	// docs/deploy.md's service config, as its Go snippet passes it.
	const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`
	t.Run("round_robin spreads batches over every pod", func(t *testing.T) {
		seen := servedBy(t, target, 200, len(pods), client.WithDialOptions(grpc.WithDefaultServiceConfig(roundRobin)))
		if len(seen) != len(pods) {
			t.Errorf("batches reached %v, want every pod of %v", seen, pods)
		}
	})
	t.Run("the default policy sticks to one pod", func(t *testing.T) {
		// Why the service config matters: pick_first sends everything down
		// one connection.
		seen := servedBy(t, target, 20, len(pods)+1)
		if len(seen) != 1 {
			t.Errorf("batches reached %v, want one pod", seen)
		}
	})
}

// servedBy runs up to n one-call batches of whoami through a new client,
// stopping early once enough pods answered, and returns the pods that did.
func servedBy(t *testing.T, target string, n, enough int, opts ...client.Option) map[string]int {
	t.Helper()
	c, err := client.New(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]int{}
	for i := 0; i < n && len(seen) < enough; i++ {
		b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{
			Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "whoami"}},
		}))
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		seen[client.Text(b.Results[0])]++
	}
	return seen
}

// startPods serves toolwire on the same port of every address, each
// server's whoami tool answering its address, and returns the port.
func startPods(t *testing.T, addrs []string) string {
	t.Helper()
	var lis []net.Listener
	for try := 0; len(lis) < len(addrs); try++ {
		if try == 10 {
			t.Fatal("found no port free on every address")
		}
		for _, l := range lis {
			l.Close()
		}
		lis = lis[:0]
		l, err := net.Listen("tcp", addrs[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		_, port, _ := net.SplitHostPort(l.Addr().String())
		for _, a := range addrs[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(a, port))
			if err != nil {
				break // taken there: try another port
			}
			lis = append(lis, l)
		}
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, l := range lis {
		who := addrs[i]
		reg, err := tools.NewRegistry(tools.MustTyped("whoami", "Says which pod answered.",
			func(context.Context, *tools.Call, struct{}) (*tools.Result, string, error) { return nil, who, nil }))
		if err != nil {
			t.Fatal(err)
		}
		eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer eng.Close()
			if err := srv.Serve(ctx, l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				t.Errorf("serve %s: %v", who, err)
			}
		})
	}
	_, port, _ := net.SplitHostPort(lis[0].Addr().String())
	return port
}

// startDNS serves DNS on a loopback UDP port: A queries for name get one
// record per address, anything else an empty answer. It returns the
// server's address.
func startDNS(t *testing.T, name string, addrs []string) string {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { conn.Close(); wg.Wait() })
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			if resp, err := answerDNS(buf[:n], name, addrs); err == nil {
				_, _ = conn.WriteTo(resp, from)
			}
		}
	})
	return conn.LocalAddr().String()
}

func answerDNS(query []byte, name string, addrs []string) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeA && strings.EqualFold(q.Name.String(), name) {
		for _, a := range addrs {
			ip := net.ParseIP(a).To4()
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
			if err := b.AResource(rh, dnsmessage.AResource{A: [4]byte(ip)}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}
