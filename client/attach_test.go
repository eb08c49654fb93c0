package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
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

// cutProxy forwards TCP connections to a server and cuts them all on
// demand, as a proxy or a connection's max age does, or freezes them.
type cutProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	frozen []*atomic.Bool // one for each pair in conns
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { lis.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		frozen := new(atomic.Bool)
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.frozen = append(p.frozen, frozen)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c, frozen)
		go p.pipe(c, s, frozen)
	}
}

// pipe copies src to dst until either fails, dropping what it reads once
// frozen is set.
func (p *cutProxy) pipe(dst, src net.Conn, frozen *atomic.Bool) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !frozen.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// freeze makes the connections open so far forward nothing, with no FIN or
// RST, as a frozen server or a path that drops packets does; new
// connections are forwarded.
func (p *cutProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frozen {
		f.Store(true)
	}
	p.frozen = nil
}

// cut closes every connection through the proxy.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns, p.frozen = nil, nil
}

// serveDiag serves the diag tools on a loopback port and returns its
// address.
func serveDiag(t *testing.T) string {
	return serveDiagWith(t, grpcserve.Config{})
}

// serveDiagWith is serveDiag with the server's cfg.
func serveDiagWith(t *testing.T, cfg grpcserve.Config) string {
	reg, err := tools.NewRegistry(diag.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{DrainTimeout: time.Second}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(eng.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	srv, err := grpcserve.New(eng, reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { served <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// TestReattachThroughCuts: a proxy cuts a detached batch's stream three
// times; the client re-attaches each time and yields every event exactly
// once, in order, to BatchFinished.
func TestReattachThroughCuts(t *testing.T) {
	proxy := newCutProxy(t, serveDiag(t))
	c, err := client.New(proxy.lis.Addr().String(), client.WithReattach(10, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &toolwirev1.ExecuteBatchRequest{
		Calls: []*toolwirev1.ToolCall{
			client.Call("a", "sleep", map[string]int{"ms": 700}),
			client.Call("b", "sleep", map[string]int{"ms": 700}),
			client.Call("c", "sleep", map[string]int{"ms": 700}),
		},
		Options: &toolwirev1.BatchOptions{Detach: true, Sequential: true},
	}
	var evs []*toolwirev1.ExecuteBatchResponse
	cuts := 0
	for ev, err := range c.ExecuteBatch(testContext(t), req) {
		if err != nil {
			t.Fatalf("after %d events and %d cuts: %v", len(evs), cuts, err)
		}
		evs = append(evs, ev)
		if n := len(evs); cuts < 3 && (n == 3 || n == 15 || n == 30) {
			proxy.cut()
			cuts++
		}
	}
	if cuts != 3 {
		t.Fatalf("the stream was cut %d times, want 3 (%d events)", cuts, len(evs))
	}
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d: lost or duplicated", i+1, ev.GetSeq())
		}
	}
	b, err := client.Collect(func(yield func(*toolwirev1.ExecuteBatchResponse, error) bool) {
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Results) != 3 || evs[len(evs)-1].GetFinished().GetSucceeded() != 3 {
		t.Errorf("results %v, last %v: want 3 calls that succeeded", b.Results, evs[len(evs)-1])
	}
}

// TestReattachThroughFreeze: a proxy freezes a detached batch's connection
// (it stays open but forwards nothing); the client's keepalive fails the
// stream and it re-attaches on a new connection, where without pings it
// waited for its deadline. 10s, gRPC's least keepalive time, is allowed by
// the server's keepalive_min_time here as by its default.
func TestReattachThroughFreeze(t *testing.T) {
	t.Parallel()
	proxy := newCutProxy(t, serveDiagWith(t, grpcserve.Config{Limits: grpcserve.Limits{KeepaliveMinTime: time.Second}}))
	c, err := client.New(proxy.lis.Addr().String(), client.WithReattach(3, 20*time.Millisecond), client.WithKeepalive(10*time.Second, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	req := &toolwirev1.ExecuteBatchRequest{
		Calls:   []*toolwirev1.ToolCall{client.Call("a", "sleep", map[string]int{"ms": 200})},
		Options: &toolwirev1.BatchOptions{Detach: true},
	}
	start := time.Now()
	var evs []*toolwirev1.ExecuteBatchResponse
	for ev, err := range c.ExecuteBatch(ctx, req) {
		if err != nil {
			t.Fatalf("after %d events and %v: %v", len(evs), time.Since(start).Round(time.Second), err)
		}
		evs = append(evs, ev)
		if len(evs) == 1 {
			proxy.freeze()
		}
	}
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d: lost or duplicated", i+1, ev.GetSeq())
		}
	}
	if last := evs[len(evs)-1]; last.GetFinished().GetSucceeded() != 1 {
		t.Errorf("last event %v, want BatchFinished with the call succeeded", last)
	}
}

// TestAttach: Attach from a seq, and NOT_FOUND for a batch that does not
// exist.
func TestAttach(t *testing.T) {
	addr := serveDiag(t)
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &toolwirev1.ExecuteBatchRequest{Calls: []*toolwirev1.ToolCall{client.Call("e", "echo", map[string]string{"text": "hi"})}, Options: &toolwirev1.BatchOptions{Detach: true}}
	var first []*toolwirev1.ExecuteBatchResponse
	for ev, err := range c.ExecuteBatch(testContext(t), req) {
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, ev)
	}
	id := first[0].GetAccepted().GetBatchId()
	var again []*toolwirev1.ExecuteBatchResponse
	for ev, err := range c.Attach(testContext(t), id, 1) {
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, ev)
	}
	if len(again) != len(first)-1 || again[0].GetSeq() != 2 {
		t.Errorf("Attach after 1 got %d events from seq %d, want %d from 2", len(again), again[0].GetSeq(), len(first)-1)
	}
	for _, err := range c.Attach(testContext(t), "nope", 0) {
		if status.Code(err) != codes.NotFound {
			t.Errorf("Attach of no batch: %v, want NotFound", err)
		}
	}
}
