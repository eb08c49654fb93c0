package connectserve

import (
	"compress/gzip"
	"fmt"
	"io"

	"connectrpc.com/connect"
)

// connect-go reads a compressed message through its decompressor up to
// the handler's read limit and, when there is more, reads on to the end
// (io.Copy to io.Discard) only to say how large it was: 4 MB of gzip that
// holds 4 GB of zeros cost 1.3 s of CPU a request, refused all the same,
// and four at once kept two cores busy. Each handler set's gzip is
// therefore boundedGzip, whose Read fails once it has produced one byte
// more than the limit (what connect-go reads to see that it is over), so
// a message past it is refused (ResourceExhausted) after at most the limit
// plus one byte of decompression.

// withGzip registers gzip for both directions of a handler set that reads
// at most max bytes of a message: reads bounded (boundedGzip), writes at
// gzip's fastest, as the gRPC port's (cmd/toolwire's compression.go).
func withGzip(max int64) connect.HandlerOption {
	return connect.WithCompression("gzip", func() connect.Decompressor { return &boundedGzip{max: max} }, newGzipWriter)
}

func newGzipWriter() connect.Compressor {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // a valid level: no error
	return w
}

// boundedGzip is a gzip decompressor that produces at most max+1 bytes a
// message, then fails.
type boundedGzip struct {
	gzip.Reader
	max, n int64 // the bound, and what it has produced of this message
}

func (g *boundedGzip) Reset(r io.Reader) error {
	g.n = 0
	return g.Reader.Reset(r)
}

func (g *boundedGzip) Read(p []byte) (int, error) {
	if g.n > g.max {
		return 0, fmt.Errorf("connectserve: the decompressed message is over %d bytes; not decompressed further", g.max)
	}
	if room := g.max + 1 - g.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := g.Reader.Read(p)
	g.n += int64(n)
	return n, err
}
