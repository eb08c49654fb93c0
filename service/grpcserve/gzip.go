package grpcserve

import (
	"bytes"
	"io"

	"google.golang.org/grpc/encoding"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
)

// A unary response is counted as waiting for its client from when it is
// ready until its bytes are written (unary.go), and what a compressed
// response writes is its compressed size. gRPC compresses after the
// interceptors, so noteUnary could only note the uncompressed size: once
// every compressed byte was written, the rest stayed counted, the
// connection looked stalled, and it was closed SendTimeout later,
// whatever ran on it (a 30 s tool call). So noteUnary compresses a
// response gRPC would compress itself, notes that, and gRPC's "gzip"
// compressor, replaced here, sends a message that is already gzip as it
// is. It can tell: a gzip stream begins 0x1f 0x8b, and no protobuf
// message does (0x1f is field 3 with wire type 7, which does not exist).
// Anything else, a client's request in this process among it, it
// compresses as gRPC's does; decompressing is gRPC's. gRPC's compressor
// does the compressing either way, at the level the program chose with
// SetGzipLevel.

// grpcGzip is gRPC's gzip compressor, which precompressed stands in for.
var grpcGzip = encoding.GetCompressor(grpcgzip.Name)

func init() {
	encoding.RegisterCompressor(&precompressed{grpc: grpcGzip})
}

// SetGzipLevel sets the level gRPC's gzip compressor compresses at, in
// this process, as grpc-go's gzip.SetLevel does: call it only from an
// init function or before any RPC. Call it rather than gzip.SetLevel,
// which, with package grpcserve linked, finds this package's compressor
// registered under "gzip" and panics.
func SetGzipLevel(level int) error {
	encoding.RegisterCompressor(grpcGzip)
	defer encoding.RegisterCompressor(&precompressed{grpc: grpcGzip})
	return grpcgzip.SetLevel(level)
}

type precompressed struct{ grpc encoding.Compressor }

func (p *precompressed) Name() string { return grpcgzip.Name }

func (p *precompressed) Decompress(r io.Reader) (io.Reader, error) { return p.grpc.Decompress(r) }

func (p *precompressed) Compress(w io.Writer) (io.WriteCloser, error) {
	return &passWriter{w: w, grpc: p.grpc}, nil
}

// passWriter passes a gzip stream through, and compresses anything else
// with gRPC's compressor; it decides at the first two bytes.
type passWriter struct {
	w    io.Writer
	grpc encoding.Compressor
	head []byte         // the first bytes, until there are two
	out  io.WriteCloser // decided: w itself, or gRPC's compressor over w
}

func (z *passWriter) Write(b []byte) (int, error) {
	if z.out == nil {
		if len(z.head)+len(b) < 2 {
			z.head = append(z.head, b...)
			return len(b), nil
		}
		if err := z.decide(append(z.head, b...)[:2]); err != nil {
			return 0, err
		}
		if len(z.head) > 0 {
			if _, err := z.out.Write(z.head); err != nil {
				return 0, err
			}
			z.head = nil
		}
	}
	return z.out.Write(b)
}

func (z *passWriter) decide(head []byte) error {
	if head[0] == 0x1f && head[1] == 0x8b {
		z.out = nopCloser{z.w}
		return nil
	}
	out, err := z.grpc.Compress(z.w)
	z.out = out
	return err
}

func (z *passWriter) Close() error {
	if z.out == nil { // fewer than two bytes: never gzip
		if err := z.decide([]byte{0, 0}); err != nil {
			return err
		}
		if _, err := z.out.Write(z.head); err != nil {
			return err
		}
	}
	return z.out.Close()
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// gzipped compresses data with gRPC's gzip compressor (the level the
// program set), into a buffer of its own.
func gzipped(data mem.BufferSlice) (mem.BufferSlice, error) {
	var buf bytes.Buffer
	buf.Grow(data.Len() / 4)
	zw, err := grpcGzip.Compress(&buf)
	if err != nil {
		return nil, err
	}
	for _, b := range data {
		if _, err := zw.Write(b.ReadOnlyData()); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(buf.Bytes())}, nil
}
