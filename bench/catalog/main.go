// Command catalog measures what listing and searching a large catalog
// costs (issue 31): a real gRPC surface on a loopback port serving
// --tools tools shaped like GitHub's (internal/testing/gencatalog, about 4.5 KB of
// declaration each), and a client in the same process. It times, each
// --runs times, alternating the cases call by call so the noise of a
// shared machine falls on all of them:
//
//   - ListTools of every tool at once (what a client that does not page
//     asks for), with gzip accepted and without;
//   - the Go client's ListTools, a page at a time (1000), with and without;
//   - the floor: a bare gRPC server answering the same ListToolsResponse,
//     built once, on the same kind of connection, with and without gzip;
//   - SearchTools of a few queries (default max_results, gzip accepted).
//
// and prints each case's p50 and p90, the bytes of its responses and the
// bytes on the wire, and its p50 as a ratio to the floor of the same
// compression (listing) or to listing everything (search).
//
//	go run ./bench/catalog                # 10,000 tools, 30 runs
//	go run ./bench/catalog --tools 1219 --runs 50
package main

import (
	stdgzip "compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/toolwire/toolwire/client"
	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/stats"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "catalog:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("catalog", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("tools", 10000, "tools in the catalog")
	runs := fs.Int("runs", 30, "times each case is measured")
	light := fs.Bool("light", false, "fold the tools' schemas into their descriptions (the same bytes; registering 10,000 tools then takes a second, not half a minute, but searches read 4 times more description)")
	level := fs.Int("gzip-level", stdgzip.BestSpeed, "the gzip level of the process, as toolwire serve sets it (1, BestSpeed); 6 is Go's default")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *n < 1 || *runs < 1 {
		return fmt.Errorf("usage: catalog [--tools N] [--runs N] [--light] [--gzip-level L]")
	}
	if err := grpcserve.SetGzipLevel(*level); err != nil {
		return err
	}

	start := time.Now()
	ts := gencatalog.Tools(*n)
	if *light {
		ts = gencatalog.Light(*n)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		return err
	}
	if _, err := gencatalog.Register(reg, "github", ts); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d tools registered in %v\n", *n, time.Since(start).Round(time.Millisecond))

	eng := engine.New(engine.Config{}, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	defer eng.Close()
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		panic(err)
	}
	addr, stopServe, err := listen(ctx, func(lis net.Listener) error { return srv.Serve(ctx, lis) })
	if err != nil {
		return err
	}
	defer stopServe()

	// The floor: the same response, built once, from a bare gRPC server.
	all, err := eng.ListTools(ctx, reg.Snapshot(), &toolwirev1.ListToolsRequest{})
	if err != nil {
		return err
	}
	floorSrv := grpc.NewServer(grpc.MaxSendMsgSize(eng.ListLimit()))
	toolwirev1.RegisterToolServiceServer(floorSrv, canned{resp: all})
	floorAddr, stopFloor, err := listen(ctx, floorSrv.Serve)
	if err != nil {
		return err
	}
	defer stopFloor()
	defer floorSrv.Stop()

	var w wire
	c, err := client.New(addr, client.WithDialOptions(grpc.WithStatsHandler(&w)))
	if err != nil {
		return err
	}
	defer c.Close()
	fc, err := client.New(floorAddr, client.WithDialOptions(grpc.WithStatsHandler(&w)))
	if err != nil {
		return err
	}
	defer fc.Close()

	big := grpc.MaxCallRecvMsgSize(eng.ListLimit())
	plain := experimental.AcceptCompressors(noneName) // accept no gzip
	unpaged := func(cl *client.Client, opts ...grpc.CallOption) func() error {
		return func() error {
			_, err := cl.ToolService().ListTools(ctx, &toolwirev1.ListToolsRequest{}, append([]grpc.CallOption{big}, opts...)...)
			return err
		}
	}
	paged := func(opts ...grpc.CallOption) func() error {
		return func() error {
			resp, err := c.ListTools(ctx, opts...)
			if err == nil && len(resp.GetTools()) != *n {
				err = fmt.Errorf("the paged listing has %d tools, not %d", len(resp.GetTools()), *n)
			}
			return err
		}
	}
	search := func(q string) func() error {
		return func() error {
			_, err := c.SearchTools(ctx, &toolwirev1.SearchToolsRequest{Query: q})
			return err
		}
	}
	name := ts[len(ts)/2].Name
	cases := []*measured{
		{name: "floor: canned response, gzip", call: unpaged(fc)},
		{name: "floor: canned response, no gzip", call: unpaged(fc, plain)},
		{name: "ListTools, every tool at once, gzip", call: unpaged(c), floor: 0},
		{name: "ListTools, every tool at once, no gzip", call: unpaged(c, plain), floor: 1},
		{name: "client ListTools, pages of 1000, gzip", call: paged(), floor: 0},
		{name: "client ListTools, pages of 1000, no gzip", call: paged(plain), floor: 1},
		{name: `SearchTools "pull request"`, call: search("pull request"), search: true},
		{name: `SearchTools "list repository secret"`, call: search("list repository secret"), search: true},
		{name: "SearchTools " + name, call: search(name), search: true},
		{name: `SearchTools "github" (every tool matches)`, call: search("github"), search: true},
	}
	for _, m := range cases { // warm up
		if err := m.call(); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		w.read()
	}
	for range *runs {
		for _, m := range cases {
			if err := ctx.Err(); err != nil {
				return err
			}
			t0 := time.Now()
			if err := m.call(); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			m.times = append(m.times, time.Since(t0))
			m.size, m.onWire, m.msgs = w.read()
		}
	}
	fmt.Fprintf(stdout, "%d tools, %d runs each, gzip level %d; bytes are one run's responses, before and on the wire\n\n", *n, *runs, *level)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tresponses\tbytes\ton the wire\tp50\tp90\tp50 ×floor\t")
	allGzip := cases[2].p(50)
	for _, m := range cases {
		ratio := "-"
		switch {
		case m.search:
			ratio = fmt.Sprintf("%.3f× listing all", float64(m.p(50))/float64(allGzip))
		case strings.HasPrefix(m.name, "floor"):
		default:
			ratio = fmt.Sprintf("%.2f", float64(m.p(50))/float64(cases[m.floor].p(50)))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%v\t%v\t%s\t\n", m.name, m.msgs, mb(m.size), mb(m.onWire), round(m.p(50)), round(m.p(90)), ratio)
	}
	return tw.Flush()
}

// measured is one case: its call and what its runs took.
type measured struct {
	name               string
	call               func() error
	floor              int  // the index of its floor among the cases
	search             bool // compared to listing every tool instead
	times              []time.Duration
	size, onWire, msgs int
}

func (m *measured) p(pct int) time.Duration {
	s := slices.Clone(m.times)
	slices.Sort(s)
	return s[(len(s)-1)*pct/100]
}

func round(d time.Duration) time.Duration {
	if d > 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func mb(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f KB", float64(n)/1e3)
}

// listen serves on a loopback port until stop.
func listen(ctx context.Context, serve func(net.Listener) error) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	served := make(chan error, 1)
	go func() { served <- serve(lis) }()
	return lis.Addr().String(), func() {
		lis.Close()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "catalog: serve:", err)
		}
	}, nil
}

// canned is the floor's ToolService: the one response, as it is.
type canned struct {
	toolwirev1.UnimplementedToolServiceServer
	resp *toolwirev1.ListToolsResponse
}

func (c canned) ListTools(ctx context.Context, _ *toolwirev1.ListToolsRequest) (*toolwirev1.ListToolsResponse, error) {
	if accepted, _ := grpc.ClientSupportedCompressors(ctx); slices.Contains(accepted, "gzip") {
		_ = grpc.SetSendCompressor(ctx, "gzip")
	}
	return c.resp, nil
}

// noneName names a compressor that is never used: a client that accepts
// only it tells the server it takes no gzip. grpc-go advertises every
// compressor the process registered (gzip, here) unless a call narrows the
// list, and it cannot narrow it to none.
const noneName = "x-none"

type none struct{}

func (none) Name() string                                 { return noneName }
func (none) Compress(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil }
func (none) Decompress(r io.Reader) (io.Reader, error)    { return r, nil }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func init() { encoding.RegisterCompressor(none{}) }

// wire counts the client's responses: their bytes, and their bytes on the
// wire.
type wire struct {
	mu                 sync.Mutex
	size, onWire, msgs int
}

func (w *wire) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w *wire) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *wire) HandleConn(context.Context, stats.ConnStats)                       {}
func (w *wire) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		w.mu.Lock()
		w.size += in.Length
		w.onWire += in.CompressedLength
		w.msgs++
		w.mu.Unlock()
	}
}

func (w *wire) read() (size, onWire, msgs int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	size, onWire, msgs = w.size, w.onWire, w.msgs
	w.size, w.onWire, w.msgs = 0, 0, 0
	return size, onWire, msgs
}
