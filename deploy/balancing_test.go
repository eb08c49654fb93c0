package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	return startPodsWith(t, addrs, grpcserve.Config{})
}

// startPodsWith is startPods with each server's config.
func startPodsWith(t *testing.T, addrs []string, cfg grpcserve.Config) string {
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
		srv, err := grpcserve.New(eng, reg, cfg)
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
	return startDNSOf(t, name, func() []string { return addrs })
}

// startDNSOf is startDNS answering with what addrs returns at the time of
// each query, as a headless Service's answer follows its ready pods.
func startDNSOf(t *testing.T, name string, addrs func() []string) string {
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
			if resp, err := answerDNS(buf[:n], name, addrs()); err == nil {
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

// TestScaleOutReachesConnectedClients: a client of the headless Service
// resolves it again only when one of its connections closes, so a replica
// the autoscaler adds gets no calls from clients already connected, however
// long they run (the overloaded replicas stay so and the autoscaler adds
// more, as idle). The servers' max_connection_age closes connections after
// a while, and the clients, reconnecting, find the new replica: with it,
// a client connected while DNS named one pod reaches the second once DNS
// names both. The replicated overlay and the chart with more than one
// replica set it; one replica leaves it unset, as the base.
func TestScaleOutReachesConnectedClients(t *testing.T) {
	t.Parallel()
	t.Run("the manifests age connections when replicated", func(t *testing.T) {
		ages := map[string]string{}
		b, err := os.ReadFile("kubernetes/overlays/replicated/kustomization.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`value: --max-connection-age=(\S+)`).FindSubmatch(b); m != nil {
			ages["replicated overlay"] = string(m[1])
		}
		bin := helmBin(t)
		for name, args := range map[string][]string{
			"chart, 3 replicas":   {"--set", "store=redis://r:6379/0", "--set", "replicas=3"},
			"chart, autoscaling":  {"--set", "store=redis://r:6379/0", "--set", "autoscaling.enabled=true"},
			"chart, one replica":  nil,
			"chart, operator's":   {"--set", "store=redis://r:6379/0", "--set", "replicas=3", "--set", "config.max_connection_age=30m"},
			"chart, by extraArgs": {"--set", "store=redis://r:6379/0", "--set", "replicas=3", "--set", "extraArgs={--max-connection-age,20m}"},
		} {
			if age, ok := helmTemplate(t, bin, release, args...).config(t, release)["max_connection_age"].(string); ok {
				ages[name] = age
			}
		}
		want := map[string]string{"replicated overlay": "10m", "chart, 3 replicas": "10m", "chart, autoscaling": "10m", "chart, operator's": "30m"}
		if diff := cmp.Diff(want, ages); diff != "" {
			t.Errorf("max_connection_age (-want +got):\n%s", diff)
		}
	})

	t.Run("an aged connection leads its client to a new pod", func(t *testing.T) {
		pods := []string{"127.0.0.3", "127.0.0.4"}
		port := startPodsWith(t, pods, grpcserve.Config{Limits: grpcserve.Limits{MaxConnectionAge: 300 * time.Millisecond}})
		var mu sync.Mutex
		ready := pods[:1] // the headless Service's answer: one pod, then both
		dnsAddr := startDNSOf(t, headlessName+".", func() []string { mu.Lock(); defer mu.Unlock(); return ready })
		c, err := client.New(fmt.Sprintf("dns://%s/%s:%s", dnsAddr, headlessName, port),
			client.WithDialOptions(grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		call := func() string {
			b, err := client.Collect(c.ExecuteBatch(t.Context(), &toolwirev1.ExecuteBatchRequest{
				Calls: []*toolwirev1.ToolCall{{CallId: "1", Name: "whoami"}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			return strings.Trim(client.Text(b.Results[0]), `"`) // whoami's JSON string
		}
		if got := call(); got != pods[0] {
			t.Fatalf("the first call reached %s, want %s, the one pod DNS names", got, pods[0])
		}
		mu.Lock()
		ready = pods
		mu.Unlock()
		// Calls until the new pod answers; each connection lasts 300 ms.
		for i := 0; ; i++ {
			if call() == pods[1] {
				t.Logf("the new pod answered call %d", i)
				return
			}
			if i == 2000 {
				t.Fatalf("2000 calls after DNS named %s too, none reached it", pods[1])
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
