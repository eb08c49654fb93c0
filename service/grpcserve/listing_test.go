package grpcserve_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/service/grpcserve"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// largeCatalog is 1,500 tools shaped like GitHub's, about 6.8 MB as one
// ListToolsResponse: more than gRPC's default 4 MiB message.
var largeCatalog = sync.OnceValue(func() []tools.Tool { return gencatalog.Light(1500) })

// serveCatalog serves ts with a new engine on a loopback port, as serve
// does (Serve, with the surface's options), and returns the address.
func serveCatalog(t testing.TB, ec engine.Config, ts []tools.Tool) string {
	t.Helper()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gencatalog.Register(reg, "github", ts); err != nil {
		t.Fatal(err)
	}
	eng := engine.New(ec, engine.Deps{Logger: slog.New(slog.DiscardHandler)})
	srv, err := grpcserve.New(eng, reg, grpcserve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
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
		eng.Close()
	})
	return lis.Addr().String()
}

// wire counts what a client received: the messages' bytes and their bytes
// on the wire (compressed, when they were).
type wire struct {
	mu           sync.Mutex
	size, onWire int
}

func (w *wire) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w *wire) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *wire) HandleConn(context.Context, stats.ConnStats)                       {}
func (w *wire) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		w.mu.Lock()
		w.size += in.Length
		w.onWire += in.CompressedLength
		w.mu.Unlock()
	}
}

func (w *wire) read() (size, onWire int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	size, onWire = w.size, w.onWire
	w.size, w.onWire = 0, 0
	return size, onWire
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) toolwirev1.ToolServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return toolwirev1.NewToolServiceClient(conn)
}

// TestListToolsLargeCatalog: a catalog larger than a gRPC message lists
// over a real connection: a page at a time within the client's default
// 4 MiB, or, for a client that does not page, all at once to a client
// that receives that much. It failed with "trying to send message larger
// than max" when the server sent everything within 4 MiB.
func TestListToolsLargeCatalog(t *testing.T) {
	t.Parallel()
	addr := serveCatalog(t, engine.Config{}, largeCatalog())
	client := dial(t, addr)
	ctx := context.Background()

	var paged []string
	pages, token := 0, ""
	for {
		page, err := client.ListTools(ctx, &toolwirev1.ListToolsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		for _, tl := range page.GetTools() {
			paged = append(paged, tl.GetName())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	// 6.8 MB in pages within 4 MiB: the page size alone would make two.
	if len(paged) != 1500 || pages < 2 {
		t.Errorf("paged: %d tools in %d pages, want 1500 in 2 or more", len(paged), pages)
	}

	// A client that does not page and takes no gzip (grpc-go's accepts it
	// once linked, and the server's limit counts compressed bytes).
	_, msg := rawExchange(t, addr, "/toolwire.v1.ToolService/ListTools", &toolwirev1.ListToolsRequest{}, "")
	all := &toolwirev1.ListToolsResponse{}
	if err := proto.Unmarshal(msg[5:], all); err != nil || msg[0] != 0 || len(msg) < 5<<20 {
		t.Fatalf("every tool at once: %d bytes, compressed %v: %v", len(msg), msg[0] == 1, err)
	}
	var names []string
	for _, tl := range all.GetTools() {
		names = append(names, tl.GetName())
	}
	if len(names) != 1500 || names[0] != paged[0] || names[1499] != paged[1499] {
		t.Errorf("every tool at once: %d tools from %s to %s; paged from %s to %s", len(names), names[0], names[len(names)-1], paged[0], paged[1499])
	}
}

// TestListToolsUnpagedOverTheLimit: every tool at once past max_list_bytes
// is RESOURCE_EXHAUSTED saying to page, not a transport error.
func TestListToolsUnpagedOverTheLimit(t *testing.T) {
	t.Parallel()
	addr := serveCatalog(t, engine.Config{MaxListBytes: 5 << 20}, largeCatalog())
	_, err := dial(t, addr).ListTools(context.Background(), &toolwirev1.ListToolsRequest{}, grpc.MaxCallRecvMsgSize(64<<20))
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "a page at a time") {
		t.Errorf("every tool at once, over 5 MiB: %v, want RESOURCE_EXHAUSTED saying to page", err)
	}
}

// rawCall sends req to method at addr as a bare gRPC request over h2c,
// advertising acceptEncoding in grpc-accept-encoding unless it is empty,
// and returns the response's grpc-encoding and whether its one message
// came compressed (the flag of gRPC's length prefix), with the message's
// size on the wire.
func rawCall(t *testing.T, addr, method string, req proto.Message, acceptEncoding string) (encoding string, compressed bool, onWire int) {
	t.Helper()
	encoding, msg := rawExchange(t, addr, method, req, acceptEncoding)
	return encoding, msg[0] == 1, len(msg) - 5
}

// rawExchange is rawCall's exchange: the response's grpc-encoding and its
// message with gRPC's length prefix.
func rawExchange(t *testing.T, addr, method string, req proto.Message, acceptEncoding string) (encoding string, msg []byte) {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b)))
	hr, err := http.NewRequest(http.MethodPost, "http://"+addr+method, bytes.NewReader(append(body, b...)))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/grpc")
	hr.Header.Set("TE", "trailers")
	if acceptEncoding != "" {
		hr.Header.Set("Grpc-Accept-Encoding", acceptEncoding)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	// grpc-status is a trailer, or a header in a trailers-only response.
	if st := resp.Trailer.Get("Grpc-Status") + resp.Header.Get("Grpc-Status"); st != "0" || len(msg) < 5 {
		t.Fatalf("%s: grpc-status %s: %s%s (%d bytes)", method, st, resp.Trailer.Get("Grpc-Message"), resp.Header.Get("Grpc-Message"), len(msg))
	}
	return resp.Header.Get("Grpc-Encoding"), msg
}

// TestListToolsGzip: a client that accepts gzip gets a large listing, and
// a large search answer, gzipped (a fraction of its size on the wire); one
// that does not, as it is; a small answer goes as it is either way. The
// Go gRPC client, which accepts gzip once a program links it (the server's
// does), gets it compressed.
func TestListToolsGzip(t *testing.T) {
	t.Parallel()
	addr := serveCatalog(t, engine.Config{}, largeCatalog()[:400])
	const list, search = "/toolwire.v1.ToolService/ListTools", "/toolwire.v1.ToolService/SearchTools"
	for _, c := range []struct {
		name, method string
		req          proto.Message
		large        bool
	}{
		{"a page", list, &toolwirev1.ListToolsRequest{PageSize: 200}, true},
		{"every tool", list, &toolwirev1.ListToolsRequest{}, true},
		{"a search", search, &toolwirev1.SearchToolsRequest{Query: "github", MaxResults: 100}, true},
		{"one tool", list, &toolwirev1.ListToolsRequest{PageSize: 1}, false},
	} {
		_, _, plain := rawCall(t, addr, c.method, c.req, "")
		enc, compressed, onWire := rawCall(t, addr, c.method, c.req, "identity,deflate,gzip")
		if c.large && (enc != "gzip" || !compressed || onWire*3 > plain) {
			t.Errorf("%s, gzip accepted: grpc-encoding %q, compressed %v, %d bytes on the wire of %d; want gzip, a third or less", c.name, enc, compressed, onWire, plain)
		}
		if !c.large && compressed {
			t.Errorf("%s (%d bytes), gzip accepted: compressed", c.name, plain)
		}
		if enc, compressed, _ := rawCall(t, addr, c.method, c.req, "identity"); compressed || (enc != "" && enc != "identity") {
			t.Errorf("%s, gzip not accepted: grpc-encoding %q, compressed %v", c.name, enc, compressed)
		}
	}

	var w wire
	if _, err := dial(t, addr, grpc.WithStatsHandler(&w)).ListTools(context.Background(), &toolwirev1.ListToolsRequest{PageSize: 400}); err != nil {
		t.Fatal(err)
	}
	if size, onWire := w.read(); onWire*3 > size {
		t.Errorf("the Go client: %d bytes, %d on the wire; want a third or less", size, onWire)
	}
}
