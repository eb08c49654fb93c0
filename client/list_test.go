package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// serveRegistry serves reg on a loopback port with a new engine, as serve
// does, and returns the address.
func serveRegistry(t *testing.T, reg *tools.Registry) string {
	t.Helper()
	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return serveGRPC(t, func(gs *grpc.Server) { srv.Register(gs) }, srv.ServerOptions()...)
}

// serveGRPC serves what register registers on a loopback port until the
// test ends, and returns the address.
func serveGRPC(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// listCalls counts the client's ListTools RPCs and what their responses
// took on the wire, and runs after (if set) after each one.
type listCalls struct {
	n            atomic.Int32
	mu           sync.Mutex
	size, onWire int
	after        func(call int32)
}

func (l *listCalls) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if strings.HasSuffix(method, "/ListTools") {
		n := l.n.Add(1)
		if l.after != nil {
			l.after(n)
		}
	}
	return err
}

func (l *listCalls) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (l *listCalls) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (l *listCalls) HandleConn(context.Context, stats.ConnStats)                       {}
func (l *listCalls) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		l.mu.Lock()
		l.size += in.Length
		l.onWire += in.CompressedLength
		l.mu.Unlock()
	}
}

func (l *listCalls) dial(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addr, append([]client.Option{client.WithDialOptions(grpc.WithUnaryInterceptor(l.intercept), grpc.WithStatsHandler(l))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func names(ts []*toolwirev1.Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.GetName()
	}
	return out
}

// TestListToolsPagesTransparently: a catalog larger than a gRPC message
// (1,500 tools, 6.8 MB) comes back whole from ListTools, in name order,
// from several pages, gzipped on the wire. It failed with
// RESOURCE_EXHAUSTED when ListTools was one message.
func TestListToolsPagesTransparently(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	want, err := gencatalog.Register(reg, "github", gencatalog.Light(1500))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	var calls listCalls
	c := calls.dial(t, serveRegistry(t, reg))
	list, err := c.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(list.GetTools()), want) || list.GetRevision() != reg.Snapshot().Revision() || list.GetNextPageToken() != "" {
		t.Errorf("%d tools at %q, token %q; want the %d of %q", len(list.GetTools()), list.GetRevision(), list.GetNextPageToken(), len(want), reg.Snapshot().Revision())
	}
	if n := calls.n.Load(); n < 2 {
		t.Errorf("%d ListTools calls; 6.8 MB within 4 MiB pages takes 2 or more", n)
	}
	if calls.onWire*3 > calls.size {
		t.Errorf("%d bytes on the wire for %d: not gzipped", calls.onWire, calls.size)
	}
	// Pages of 100: fifteen.
	calls.n.Store(0)
	if list, err := calls.dial(t, serveRegistry(t, reg), client.WithListPageSize(100)).ListTools(context.Background()); err != nil || len(list.GetTools()) != 1500 || calls.n.Load() != 15 {
		t.Errorf("pages of 100: %d tools in %d calls, %v", len(list.GetTools()), calls.n.Load(), err)
	}
}

func nop(context.Context, *tools.Call) (*tools.Result, error) { return nil, nil }

// TestListToolsStartsOver: when the tools change between pages, ListTools
// starts over and returns the new revision's tools; when they change
// between every two pages, it gives up after three restarts with ABORTED.
func TestListToolsStartsOver(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.Tool{Name: "a", Handler: nop}, tools.Tool{Name: "b", Handler: nop}, tools.Tool{Name: "c", Handler: nop})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveRegistry(t, reg)
	calls := listCalls{after: func(n int32) {
		if n == 1 { // after the first page of the first listing
			_ = reg.Add(tools.Tool{Name: "d", Handler: nop})
		}
	}}
	list, err := calls.dial(t, addr, client.WithListPageSize(2)).ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// One page, the refused second, then two pages of the new revision.
	if got := names(list.GetTools()); !slices.Equal(got, []string{"a", "b", "c", "d"}) || list.GetRevision() != reg.Snapshot().Revision() || calls.n.Load() != 4 {
		t.Errorf("%v at %q in %d calls; want a-d at %q in 4", got, list.GetRevision(), calls.n.Load(), reg.Snapshot().Revision())
	}

	var changes atomic.Int32
	always := listCalls{after: func(n int32) {
		if n%2 == 1 { // after every first page
			_ = reg.Add(tools.Tool{Name: "z" + string(rune('a'+changes.Add(1))), Handler: nop})
		}
	}}
	_, err = always.dial(t, addr, client.WithListPageSize(2)).ListTools(context.Background())
	if status.Code(err) != codes.Aborted || always.n.Load() != 8 {
		t.Errorf("tools changing between every two pages: %v after %d calls; want ABORTED after 4 listings of 2 calls", err, always.n.Load())
	}
}

// pager is a ToolService whose ListTools answers as page says: a stub of a
// server that does not page, or whose pages do not advance.
type pager struct {
	toolwirev1.UnimplementedToolServiceServer
	page func(*toolwirev1.ListToolsRequest) *toolwirev1.ListToolsResponse
}

func (p pager) ListTools(_ context.Context, req *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	return p.page(req), nil
}

// TestListToolsOtherServers: a server that predates paging (it ignores
// page_size and sends every tool) is listed in one call; one whose pages
// do not advance is an error, not a loop.
func TestListToolsOtherServers(t *testing.T) {
	t.Parallel()
	tool := func(name string) *toolwirev1.Tool { return &toolwirev1.Tool{Name: name} }
	old := serveGRPC(t, func(gs *grpc.Server) {
		toolwirev1.RegisterToolServiceServer(gs, pager{page: func(*toolwirev1.ListToolsRequest) *toolwirev1.ListToolsResponse {
			return &toolwirev1.ListToolsResponse{Tools: []*toolwirev1.Tool{tool("a"), tool("b"), tool("c")}, Revision: "r1"}
		}})
	})
	var calls listCalls
	list, err := calls.dial(t, old, client.WithListPageSize(1)).ListTools(context.Background())
	if err != nil || len(list.GetTools()) != 3 || calls.n.Load() != 1 {
		t.Errorf("a server that does not page: %d tools in %d calls, %v", len(list.GetTools()), calls.n.Load(), err)
	}

	for name, page := range map[string]func(*toolwirev1.ListToolsRequest) *toolwirev1.ListToolsResponse{
		"the same page again": func(*toolwirev1.ListToolsRequest) *toolwirev1.ListToolsResponse {
			return &toolwirev1.ListToolsResponse{Tools: []*toolwirev1.Tool{tool("a")}, Revision: "r1", NextPageToken: "more"}
		},
		"empty pages": func(*toolwirev1.ListToolsRequest) *toolwirev1.ListToolsResponse {
			return &toolwirev1.ListToolsResponse{Revision: "r1", NextPageToken: "more"}
		},
	} {
		addr := serveGRPC(t, func(gs *grpc.Server) { toolwirev1.RegisterToolServiceServer(gs, pager{page: page}) })
		var calls listCalls
		_, err := calls.dial(t, addr).ListTools(context.Background())
		if err == nil || !strings.Contains(err.Error(), "do not advance") || calls.n.Load() > 2 {
			t.Errorf("%s: %v after %d calls, want an error saying the pages do not advance", name, err, calls.n.Load())
		}
	}
}

// TestListToolsAcrossVersions: in a rolling upgrade a balancer sends a
// listing's pages to replicas of two versions, and one that predates
// paging answers a page token with every tool and no token. That answer
// is the listing (of its revision, which may differ from the first
// page's), where ListTools failed: with page size 2 over a real
// d0fe4b5 replica and a replica of this version, round robin, 7 of 10
// listings ended "the server's pages do not advance".
func TestListToolsAcrossVersions(t *testing.T) {
	t.Parallel()
	tool := func(name string) *toolwirev1.Tool { return &toolwirev1.Tool{Name: name} }
	for _, oldRevision := range []string{"r1", "r0"} {
		addr := serveGRPC(t, func(gs *grpc.Server) {
			toolwirev1.RegisterToolServiceServer(gs, pager{page: func(req *toolwirev1.ListToolsRequest) *toolwirev1.ListToolsResponse {
				if req.GetPageToken() == "" { // this version's first page
					return &toolwirev1.ListToolsResponse{Tools: []*toolwirev1.Tool{tool("a")}, Revision: "r1", NextPageToken: "t"}
				}
				// The old version's answer to the next page's request.
				return &toolwirev1.ListToolsResponse{Tools: []*toolwirev1.Tool{tool("a"), tool("b"), tool("c")}, Revision: oldRevision}
			}})
		})
		var calls listCalls
		list, err := calls.dial(t, addr, client.WithListPageSize(1)).ListTools(context.Background())
		if err != nil || !slices.Equal(names(list.GetTools()), []string{"a", "b", "c"}) || list.GetRevision() != oldRevision || list.GetNextPageToken() != "" {
			t.Errorf("old revision %s: %v (revision %q) after %d calls, %v; want a, b, c of %s", oldRevision, names(list.GetTools()), list.GetRevision(), calls.n.Load(), err, oldRevision)
		}
	}
}

// TestSearchTools: the best matches of a query in a large catalog, the
// caller's, counted; an empty query is INVALID_ARGUMENT.
func TestSearchTools(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	names, err := gencatalog.Register(reg, "github", gencatalog.Light(1500))
	if err != nil {
		t.Fatal(err)
	}
	var calls listCalls
	c := calls.dial(t, serveRegistry(t, reg))
	resp, err := c.SearchTools(context.Background(), &toolwirev1.SearchToolsRequest{Query: names[42]})
	if err != nil || len(resp.GetTools()) == 0 || resp.GetTools()[0].GetName() != names[42] || resp.GetTotalMatches() < 1 {
		t.Errorf("a tool's name: %v of %d, %v; want %s first", resp.GetTools(), resp.GetTotalMatches(), err, names[42])
	}
	resp, err = c.SearchTools(context.Background(), &toolwirev1.SearchToolsRequest{Query: "github", MaxResults: 100})
	if err != nil || len(resp.GetTools()) != 100 || resp.GetTotalMatches() != 1500 {
		t.Errorf("the source: %d of %d, %v", len(resp.GetTools()), resp.GetTotalMatches(), err)
	}
	if _, err := c.SearchTools(context.Background(), &toolwirev1.SearchToolsRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an empty query: %v", err)
	}
}
