package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolwire/toolwire/engine"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"github.com/toolwire/toolwire/tools/diag"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// holdTool is the tool each toolwire stream calls.
const holdTool = "hold"

// serveArgs reports whether args ask for the server side (--serve NAME
// --calls N), which the client starts as its child.
func serveArgs(args []string) (name string, calls int, ok bool) {
	if len(args) == 0 || args[0] != "--serve" {
		return "", 0, false
	}
	fs := flag.NewFlagSet("inflight --serve", flag.ContinueOnError)
	fs.StringVar(&name, "serve", "", "")
	fs.IntVar(&calls, "calls", 0, "")
	fs.IntVar(&runtime.MemProfileRate, "memprofilerate", runtime.MemProfileRate, "")
	if fs.Parse(args) != nil {
		return "", 0, false
	}
	return name, calls, true
}

// gate holds calls until released: each call waits on the channel current
// when it came; release closes it and puts a new one in its place.
type gate struct {
	mu   sync.Mutex
	ch   chan struct{}
	held atomic.Int64 // calls waiting
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

// wait holds until released or until ctx ends, reporting which.
func (g *gate) wait(ctx context.Context) bool {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	g.held.Add(1)
	defer g.held.Add(-1)
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func (g *gate) release() {
	g.mu.Lock()
	close(g.ch)
	g.ch = make(chan struct{})
	g.mu.Unlock()
}

// runServer serves name (grpc or toolwire) on a loopback port, says where
// on out ("listening ADDR"), and answers the client's requests on in until
// in closes.
func runServer(ctx context.Context, name string, calls int, in io.Reader, out io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	g := newGate()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	switch name {
	case "grpc":
		gs := grpc.NewServer()
		testpb.RegisterTestServiceServer(gs, bareServer{gate: g})
		go func() { served <- gs.Serve(lis) }()
		go func() { <-ctx.Done(); gs.Stop() }()
	case "toolwire":
		srv, closeEngine, err := newToolwire(g, calls)
		if err != nil {
			return err
		}
		defer closeEngine()
		go func() { served <- srv.Serve(ctx, lis) }()
	default:
		return fmt.Errorf("--serve %q: want grpc or toolwire", name)
	}
	fmt.Fprintln(out, "listening", lis.Addr())
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "stats":
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			b, _ := json.Marshal(stats{Heap: m.HeapAlloc, Stacks: m.StackInuse, Goroutines: runtime.NumGoroutine(), Held: g.held.Load()})
			fmt.Fprintf(out, "%s\n", b)
		case "heap":
			// The heap profile, for looking at what a held call keeps:
			// written to heap.pprof in the working directory.
			f, err := os.Create("heap.pprof")
			if err == nil {
				runtime.GC()
				err = pprof.WriteHeapProfile(f)
				f.Close()
			}
			fmt.Fprintln(out, "heap", err)
		case "release":
			g.release()
			fmt.Fprintln(out, "released")
		default:
			fmt.Fprintf(out, "unknown request %q\n", sc.Text())
		}
	}
	stop()
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// newToolwire returns toolwire's gRPC surface over an engine that can hold
// calls streams at once, with the diag tools and hold.
func newToolwire(g *gate, calls int) (*grpcserve.Server, func(), error) {
	hold := tools.Tool{
		Name:        holdTool,
		Description: "Waits until the bench releases it, then returns.",
		InputSchema: []byte(`{"type":"object"}`),
		Annotations: tools.Annotations{ReadOnly: true},
		Handler: func(ctx context.Context, _ *tools.Call) (*tools.Result, error) {
			if !g.wait(ctx) {
				return nil, ctx.Err()
			}
			return tools.Text("released"), nil
		},
	}
	reg, err := tools.NewRegistry(append(diag.Tools(), hold)...)
	if err != nil {
		return nil, nil, err
	}
	eng := engine.New(engine.Config{
		MaxConcurrentBatches: calls + 1024,
		MaxConcurrentCalls:   calls + 1024,
		DefaultCallTimeout:   time.Hour,
		MaxCallTimeout:       time.Hour,
	}, engine.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// --conns 1 puts every stream on one connection.
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{Limits: grpcserve.Limits{MaxConcurrentStreams: calls + 1024}})
	if err != nil {
		eng.Close()
		return nil, nil, err
	}
	return srv, eng.Close, nil
}

// bareServer is the floor: a server stream of one message, held, then one
// more.
type bareServer struct {
	testpb.UnimplementedTestServiceServer
	gate *gate
}

func (s bareServer) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	if !s.gate.wait(stream.Context()) {
		return stream.Context().Err()
	}
	return stream.Send(&testpb.StreamingOutputCallResponse{})
}
