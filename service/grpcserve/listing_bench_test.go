package grpcserve_test

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/toolwire/toolwire/engine"
	toolwirev1 "github.com/toolwire/toolwire/gen/toolwire/v1"
	"github.com/toolwire/toolwire/internal/testing/gencatalog"
	"github.com/toolwire/toolwire/tools"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
)

// benchTools is 10,000 GitHub-shaped tools (45 MB of declarations),
// made once per test binary; registering them compiles their schemas,
// which takes half a minute on a busy machine.
var benchTools = sync.OnceValue(func() []tools.Tool { return gencatalog.Tools(10000) })

// noGzip names a compressor that is never used: a call that accepts only
// it tells the server it takes no gzip (grpc-go advertises every
// compressor the process registered, and a call cannot narrow that to
// none).
const noGzip = "x-none"

type noneCompressor struct{}

func (noneCompressor) Name() string                                 { return noGzip }
func (noneCompressor) Compress(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil }
func (noneCompressor) Decompress(r io.Reader) (io.Reader, error)    { return r, nil }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func init() { encoding.RegisterCompressor(noneCompressor{}) }

// BenchmarkListTools: ListTools of 10,000 tools over a real connection,
// every tool at once and in the pages of 1000 a client asks for, gzipped
// (grpc-go's default level: the test binary does not set the server
// binary's) and not; msg-B/op is the responses' size, wire-B/op their
// size on the wire.
func BenchmarkListTools(b *testing.B) {
	addr := serveCatalog(b, engine.Config{}, benchTools())
	var w wire
	client := dial(b, addr, grpc.WithStatsHandler(&w))
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		pageSize int32
		opts     []grpc.CallOption
	}{
		{"all/gzip", 0, nil},
		{"all/identity", 0, []grpc.CallOption{experimental.AcceptCompressors(noGzip)}},
		{"pages/gzip", 1000, nil},
		{"pages/identity", 1000, []grpc.CallOption{experimental.AcceptCompressors(noGzip)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := append([]grpc.CallOption{grpc.MaxCallRecvMsgSize(64 << 20)}, c.opts...)
			w.read()
			for b.Loop() {
				token := ""
				for {
					page, err := client.ListTools(ctx, &toolwirev1.ListToolsRequest{PageSize: c.pageSize, PageToken: token}, opts...)
					if err != nil {
						b.Fatal(err)
					}
					if token = page.GetNextPageToken(); token == "" {
						break
					}
				}
			}
			size, onWire := w.read()
			b.ReportMetric(float64(size)/float64(b.N), "msg-B/op")
			b.ReportMetric(float64(onWire)/float64(b.N), "wire-B/op")
		})
	}
}

// BenchmarkSearchTools: SearchTools over 10,000 tools over a real
// connection, for a few kinds of query.
func BenchmarkSearchTools(b *testing.B) {
	ts := benchTools()
	client := dial(b, serveCatalog(b, engine.Config{}, ts))
	for _, q := range []string{"pull request", "list repository secret", ts[5000].Name, "github"} {
		b.Run(q, func(b *testing.B) {
			for b.Loop() {
				if _, err := client.SearchTools(context.Background(), &toolwirev1.SearchToolsRequest{Query: q}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
